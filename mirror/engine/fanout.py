"""Fan-out: a source blob needed by several targets is read from the source once, spooled to a local file
as it arrives, and every target's upload reads the spool at its own pace (no target waits for a slower
one). The spool is bounded in size (a blob that does not fit is streamed from the source as usual) and
removed at the end of the run."""

from __future__ import annotations

import asyncio
import logging
import shutil
import tempfile
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import aiofiles

from mirror.engine.stream import verified_stream
from mirror.engine.upload import RegistryOrigin
from mirror.oci import Descriptor
from mirror.registry import BlobBody

log = logging.getLogger("mirror")


@dataclass
class _Entry:
    path: Path
    size: int
    written: int = 0
    error: BaseException | None = None
    changed: asyncio.Condition = field(default_factory=asyncio.Condition)
    task: asyncio.Task[None] | None = None

    @property
    def failed(self) -> bool:
        return self.error is not None

    async def fill(self, source: RegistryOrigin, blob: Descriptor) -> None:
        """Download once, checked as it passes (the last chunk is held back until the digest matches)."""
        try:
            async with source.open(blob) as body, aiofiles.open(self.path, "wb") as spool:
                async for chunk in verified_stream(body.chunks, blob):
                    await spool.write(chunk)
                    await spool.flush()
                    async with self.changed:
                        self.written += len(chunk)
                        self.changed.notify_all()
        except BaseException as exc:
            async with self.changed:
                self.error = exc
                self.changed.notify_all()
            if not isinstance(exc, Exception):
                raise

    async def read(self, start: int, chunk_size: int) -> AsyncIterator[bytes]:
        async with aiofiles.open(self.path, "rb") as spool:
            await spool.seek(start)
            position = start
            while position < self.size:
                async with self.changed:
                    while self.written <= position and self.error is None:
                        await self.changed.wait()
                    available = self.written
                if available <= position and self.error is not None:
                    raise self.error
                data = await spool.read(min(chunk_size, available - position))
                position += len(data)
                yield data


class Spool:
    def __init__(self, max_bytes: int, chunk_size: int, directory: Path | None = None) -> None:
        self.max_bytes = max_bytes
        self.chunk_size = chunk_size
        self._parent = directory
        self._dir: Path | None = None
        self._entries: dict[str, _Entry] = {}
        self._reserved = 0
        self.source_reads = 0

    def origin(self, source: RegistryOrigin) -> SpooledOrigin:
        return SpooledOrigin(self, source)

    def _directory(self) -> Path:
        if self._dir is None:
            if self._parent is not None:
                self._parent.mkdir(parents=True, exist_ok=True)
            self._dir = Path(tempfile.mkdtemp(prefix="mirror-spool-", dir=self._parent))
        return self._dir

    def _entry(self, source: RegistryOrigin, blob: Descriptor) -> _Entry | None:
        entry = self._entries.get(blob.digest)
        if entry is not None and not entry.failed:
            return entry
        if entry is None and self._reserved + blob.size > self.max_bytes:
            return None
        if entry is None:
            self._reserved += blob.size
        path = self._directory() / blob.digest.replace(":", "-")
        path.touch()
        entry = self._entries[blob.digest] = _Entry(path, blob.size)
        entry.task = asyncio.ensure_future(entry.fill(source, blob))
        self.source_reads += 1
        return entry

    @asynccontextmanager
    async def open(self, source: RegistryOrigin, blob: Descriptor, start: int = 0) -> AsyncIterator[BlobBody]:
        entry = self._entry(source, blob)
        if entry is None:  # over the spool's bound: read the source directly
            async with source.open(blob, start) as body:
                yield body
            return
        yield BlobBody(entry.read(start, self.chunk_size), start)

    async def aclose(self) -> None:
        for entry in self._entries.values():
            if entry.task is not None and not entry.task.done():
                entry.task.cancel()
        await asyncio.gather(*(e.task for e in self._entries.values() if e.task), return_exceptions=True)
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None
        self._entries.clear()


@dataclass(frozen=True, slots=True)
class SpooledOrigin:
    spool: Spool
    source: RegistryOrigin

    def open(self, blob: Descriptor, start: int = 0) -> AbstractAsyncContextManager[BlobBody]:
        return self.spool.open(self.source, blob, start)
