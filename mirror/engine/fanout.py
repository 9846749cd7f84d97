"""Fan-out: a source blob needed by several targets is read from the source once, spooled to a local file
as it arrives, and every target's upload reads the spool at its own pace (no target waits for a slower
one). The spool is bounded in size, and by the disk's free space (a blob that does not fit is streamed from
the source as usual), and removed at the end of the run. A run that was killed cannot remove its spool: each
spool holds a lock for its run's life, and the next run removes spools whose lock nobody holds.

The disk can still fail the spool after its free space was checked (another writer filled it, an I/O error):
that is a `SpoolError`, a MirrorError that a blob transfer retries like any passing failure, and the blob is
not spooled again, so the retry reads it from the source, per target."""

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
from aiofiles.threadpool.binary import AsyncBufferedReader

from mirror.engine.stream import verified_stream
from mirror.engine.upload import RegistryOrigin
from mirror.errors import Kind, MirrorError
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


class SpoolError(MirrorError):
    """The spool's disk failed a write or a read of a blob (full, failing, its file gone)."""

    kind = Kind.UNAVAILABLE


@dataclass
class _Entry:
    path: Path
    digest: str
    size: int
    written: int = 0
    error: BaseException | None = None
    changed: asyncio.Condition = field(default_factory=asyncio.Condition)
    answered: asyncio.Event = field(default_factory=asyncio.Event)  # the source's answer is open, or it failed
    task: asyncio.Task[None] | None = None

    @property
    def failed(self) -> bool:
        return self.error is not None

    @property
    def disk_failed(self) -> bool:
        return isinstance(self.error, SpoolError)

    def _disk_error(self, doing: str, exc: OSError) -> SpoolError:
        where = self.path.parent
        return SpoolError(
            f"blob {self.digest}: the spool's disk (spool.dir: {where}) failed to {doing} it: {exc.strerror}"
        )

    async def fill(self, source: RegistryOrigin, blob: Descriptor) -> None:
        """Download once, checked as it passes (the last chunk is held back until the digest matches)."""
        try:
            async with source.open(blob) as body, aiofiles.open(self.path, "wb") as spool:
                self.answered.set()
                async for chunk in verified_stream(body.chunks, blob):
                    try:
                        await spool.write(chunk)
                        await spool.flush()
                    except OSError as exc:
                        raise self._disk_error("write", exc) from exc
                    async with self.changed:
                        self.written += len(chunk)
                        self.changed.notify_all()
        except BaseException as exc:
            await self._fail(exc)
            if not isinstance(exc, Exception):
                raise

    async def _fail(self, exc: BaseException) -> None:
        if isinstance(exc, OSError):  # opening or closing the file: the source's failures are MirrorErrors
            exc = self._disk_error("write", exc)
        if isinstance(exc, SpoolError):
            log.warning("%s; each target reads it from the source instead", exc)
            self.path.unlink(missing_ok=True)  # give the disk back; readers holding the file keep it
        async with self.changed:
            self.error = exc
            self.changed.notify_all()

    async def read(self, start: int, chunk_size: int) -> AsyncIterator[bytes]:
        try:
            async with aiofiles.open(self.path, "rb") as spool:
                await spool.seek(start)
                async for data in self._arriving(spool, start, chunk_size):
                    yield data
        except OSError as exc:
            if isinstance(self.error, SpoolError):  # the write failed and gave its file back before this read began
                raise self.error from exc
            raise self._disk_error("read", exc) from exc

    async def _arriving(self, spool: AsyncBufferedReader, position: int, chunk_size: int) -> AsyncIterator[bytes]:
        """The file's bytes from `position` as the download writes them; its failure once they run out."""
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
            # locked before it takes its name: another run's sweep that found the owner file unlocked, between
            # its making and its locking, would remove the spool in use
            unnamed = self._dir / f"{OWNER_FILE}.new"
            self._owner = os.open(unnamed, os.O_CREAT | os.O_RDWR, 0o600)
            fcntl.flock(self._owner, fcntl.LOCK_EX)
            unnamed.rename(self._dir / OWNER_FILE)
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
        """The blob's spool entry, started if need be; None where it is to be read from the source: over the
        spool's bound or the disk's free space, or once the disk failed this blob."""
        entry = self._entries.get(blob.digest)
        if entry is not None and entry.disk_failed:
            return None
        if entry is not None and not entry.failed:
            return entry
        if entry is None and self._reserved + blob.size > self.max_bytes:
            return None
        if entry is not None:  # failed: downloaded again into a file of its own; its readers keep theirs
            entry.path.unlink(missing_ok=True)
        if not self._room_for(blob.size):  # a download again too: the disk may have filled since
            return None
        if entry is None:
            self._reserved += blob.size
        self._files += 1
        path = self._directory() / f"{blob.digest.replace(':', '-')}.{self._files}"
        try:
            path.touch()
        except OSError as exc:
            log.warning("spool %s: cannot create a file (%s); blobs stream per target", path.parent, exc.strerror)
            return None
        entry = self._entries[blob.digest] = _Entry(path, blob.digest, blob.size)
        entry.task = asyncio.ensure_future(entry.fill(source, blob))
        entry.task.add_done_callback(lambda _: entry.answered.set())  # failed, or cancelled before it began
        return entry

    @asynccontextmanager
    async def open(self, source: RegistryOrigin, blob: Descriptor, start: int = 0) -> AsyncIterator[BlobBody]:
        entry = self._entry(source, blob)
        if entry is None:  # over the spool's bound: read the source directly
            async with source.open(blob, start) as body:
                yield body
            return
        # The upload starts only once the download holds its source connection: an upload holding a target's
        # connection while the download waited for one at the source, whose connections were held by reads
        # streamed per target waiting for that target, would never move.
        await entry.answered.wait()
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
