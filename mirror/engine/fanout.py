"""Fan-out: a source blob needed by several targets is read from the source once, spooled to a local file
as it arrives, and every target's upload reads the spool at its own pace (no target waits for a slower
one). The spool is bounded in size, and by the disk's free space (a blob that does not fit is streamed from
the source as usual), and removed at the end of the run. A run that was killed cannot remove its spool: each
spool holds a lock for its run's life, and the next run removes spools whose lock nobody holds."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import shutil
import tempfile
import time
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

SPOOL_PREFIX = "mirror-spool-"
OWNER_FILE = ".owner"  # flocked by the run that made the spool, released by the kernel when it dies
UNLOCKED_GRACE = 600.0  # a spool made but not yet locked (a run starting right now) is left alone this long
FREE_SPACE_MARGIN = 256 * 1024 * 1024  # never fill the spool's disk closer than this


def sweep_stale_spools(parent: Path) -> list[Path]:
    """Remove the spools under `parent` whose run is gone (killed before it could clean up)."""
    removed = []
    for path in parent.glob(f"{SPOOL_PREFIX}*"):
        if path.is_dir() and not path.is_symlink() and _abandoned(path):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    if removed:
        log.info("removed %d spool(s) left by runs that did not finish: %s", len(removed), ", ".join(map(str, removed)))
    return removed


def _abandoned(spool: Path) -> bool:
    try:
        fd = os.open(spool / OWNER_FILE, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return time.time() - spool.stat().st_mtime > UNLOCKED_GRACE
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False  # its run is alive
    finally:
        os.close(fd)
    return True


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
        self._files = 0  # spool files made, naming each download's file
        self._owner: int | None = None
        with contextlib.suppress(OSError):
            sweep_stale_spools(directory or Path(tempfile.gettempdir()))

    def origin(self, source: RegistryOrigin) -> SpooledOrigin:
        return SpooledOrigin(self, source)

    def _directory(self) -> Path:
        if self._dir is None:
            if self._parent is not None:
                self._parent.mkdir(parents=True, exist_ok=True)
            self._dir = Path(tempfile.mkdtemp(prefix=SPOOL_PREFIX, dir=self._parent))
            self._owner = os.open(self._dir / OWNER_FILE, os.O_CREAT | os.O_RDWR, 0o600)
            fcntl.flock(self._owner, fcntl.LOCK_EX)
        return self._dir

    def _room_for(self, size: int) -> bool:
        """The spool's disk can take `size` more bytes (besides what is reserved), with a margin to spare."""
        try:
            free = shutil.disk_usage(self._directory()).free
        except OSError:
            return False
        unwritten = sum(e.size - e.written for e in self._entries.values() if not e.failed)
        return free - unwritten - FREE_SPACE_MARGIN >= size

    def _entry(self, source: RegistryOrigin, blob: Descriptor) -> _Entry | None:
        entry = self._entries.get(blob.digest)
        if entry is not None and not entry.failed:
            return entry
        if entry is None and (self._reserved + blob.size > self.max_bytes or not self._room_for(blob.size)):
            return None
        if entry is None:
            self._reserved += blob.size
        else:  # failed: downloaded again into a file of its own; readers of this one still read what it holds
            entry.path.unlink(missing_ok=True)
        self._files += 1
        path = self._directory() / f"{blob.digest.replace(':', '-')}.{self._files}"
        path.touch()
        entry = self._entries[blob.digest] = _Entry(path, blob.size)
        entry.task = asyncio.ensure_future(entry.fill(source, blob))
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
        if self._owner is not None:
            os.close(self._owner)
            self._owner = None
        self._entries.clear()


@dataclass(frozen=True, slots=True)
class SpooledOrigin:
    spool: Spool
    source: RegistryOrigin

    def open(self, blob: Descriptor, start: int = 0) -> AbstractAsyncContextManager[BlobBody]:
        return self.spool.open(self.source, blob, start)
