"""Getting blobs into a target registry: skip, mount or stream, each blob once per target in a run."""

from __future__ import annotations

import asyncio
import enum
import hashlib
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from mirror.oci import Descriptor
from mirror.registry import RegistryClient, RegistryError, RegistryUnreachable, UploadSession
from mirror.registry.errors import IntegrityError

log = logging.getLogger("mirror")


class BlobOutcome(enum.StrEnum):
    PRESENT = "present"
    MOUNTED = "mounted"
    UPLOADED = "uploaded"


async def verified_stream(
    chunks: AsyncIterator[bytes], blob: Descriptor, on_bytes: Callable[[int], None] | None = None
) -> AsyncIterator[bytes]:
    """Pass the bytes through, hashing them, and hold the last chunk back until size and sha256 check out:
    an upload whose bytes do not match its digest is never completed."""
    hasher = hashlib.sha256()
    size = 0
    held: bytes | None = None
    async for chunk in chunks:
        if not chunk:
            continue
        size += len(chunk)
        if size > blob.size:
            raise IntegrityError(f"blob {blob.digest}: source sent more than the {blob.size} bytes it declares")
        hasher.update(chunk)
        if held is not None:
            yield held
            if on_bytes:
                on_bytes(len(held))
        held = chunk
    digest = "sha256:" + hasher.hexdigest()
    if size != blob.size or digest != blob.digest:
        raise IntegrityError(f"blob {blob.digest}: source sent {size} bytes hashing to {digest}, expected {blob.size}")
    if held is not None:
        yield held
        if on_bytes:
            on_bytes(len(held))


async def hash_blob(client: RegistryClient, repository: str, blob: Descriptor) -> str | None:
    """Re-read a blob and return a problem, or None when its bytes match its descriptor."""
    try:
        async for _ in verified_stream(_open_chunks(client, repository, blob.digest), blob):
            pass
    except IntegrityError as exc:
        return str(exc)
    return None


async def _open_chunks(client: RegistryClient, repository: str, digest: str) -> AsyncIterator[bytes]:
    async with client.open_blob(repository, digest) as chunks:
        async for chunk in chunks:
            yield chunk


@dataclass(frozen=True, slots=True)
class BlobOrigin:
    """Where a blob's bytes come from: a repository at the source registry."""

    client: RegistryClient
    repository: str


@dataclass
class TargetBlobs:
    """What one target registry holds, as learned during a run, and the transfers into it.

    The first repository that needs a blob gets it streamed from the source; every other repository on the
    same registry then mounts it from there. Known locations also come from HEAD checks."""

    client: RegistryClient
    transfer_limit: asyncio.Semaphore
    repositories: frozenset[str] = frozenset()  # the run's repositories here: candidates for a mount
    _present: dict[str, set[str]] = field(default_factory=dict)
    _first: dict[str, str] = field(default_factory=dict)  # digest -> the repository that transfers it
    _ensured: dict[tuple[str, str], asyncio.Task[BlobOutcome]] = field(default_factory=dict)

    def known_present(self, repository: str, digest: str) -> bool:
        return repository in self._present.get(digest, ())

    def record(self, repository: str, digest: str) -> None:
        self._present.setdefault(digest, set()).add(repository)

    async def exists(self, repository: str, blob: Descriptor) -> bool:
        """HEAD the blob unless the run already knows; a size mismatch counts as missing."""
        if self.known_present(repository, blob.digest):
            return True
        size = await self.client.head_blob(repository, blob.digest)
        if size == blob.size:
            self.record(repository, blob.digest)
            return True
        return False

    def mount_source(self, repository: str, digest: str) -> str | None:
        """Another repository here known to hold the blob, or failing that one of the run's repositories
        that may (a failed mount costs nothing: the registry starts an ordinary upload instead)."""
        known = sorted(self._present.get(digest, set()) - {repository})
        if known:
            return known[0]
        guesses = sorted(self.repositories - {repository})
        return guesses[0] if guesses else None

    async def ensure(
        self, repository: str, blob: Descriptor, origin: BlobOrigin, on_bytes: Callable[[int], None] | None = None
    ) -> BlobOutcome:
        """Make `repository` hold `blob`. Concurrent calls for the same blob share one transfer."""
        key = (repository, blob.digest)
        task = self._ensured.get(key)
        if task is None:
            task = asyncio.ensure_future(self._ensure(repository, blob, origin, on_bytes))
            task.add_done_callback(_consume_exception)  # a waiter may have been cancelled
            self._ensured[key] = task
        return await asyncio.shield(task)

    def cancel_pending(self) -> None:
        for task in self._ensured.values():
            task.cancel()

    async def _ensure(
        self, repository: str, blob: Descriptor, origin: BlobOrigin, on_bytes: Callable[[int], None] | None
    ) -> BlobOutcome:
        if self.known_present(repository, blob.digest):
            return BlobOutcome.PRESENT
        first = self._first.setdefault(blob.digest, repository)
        if first != repository:
            # Another repository here is already getting this blob: wait, then mount it from there.
            await asyncio.wait([self._ensured[(first, blob.digest)]])
        return await self._transfer(repository, blob, origin, on_bytes)

    async def _transfer(
        self, repository: str, blob: Descriptor, origin: BlobOrigin, on_bytes: Callable[[int], None] | None
    ) -> BlobOutcome:
        async with self.transfer_limit:
            mount_from = self.mount_source(repository, blob.digest)
            session = await self.client.start_upload(repository, blob.digest, mount_from)
            if session is None:
                self.record(repository, blob.digest)
                if on_bytes:
                    on_bytes(blob.size)
                return BlobOutcome.MOUNTED
            try:
                await self._stream(repository, session, blob, origin, on_bytes)
            except (RegistryError, RegistryUnreachable) as exc:
                if isinstance(exc, RegistryError) and exc.status != 401:
                    raise
                # A streamed upload cannot be replayed. When the registry refused its token (a 401, or the
                # connection dropped mid-body), start a new session once: its POST gets a fresh token.
                log.info("%s: restarting the upload of %s: %s", self.client.host, blob.digest, exc)
                session = await self.client.start_upload(repository)
                assert session is not None
                await self._stream(repository, session, blob, origin, on_bytes)
        self.record(repository, blob.digest)
        return BlobOutcome.UPLOADED

    async def _stream(
        self,
        repository: str,
        session: UploadSession,
        blob: Descriptor,
        origin: BlobOrigin,
        on_bytes: Callable[[int], None] | None,
    ) -> None:
        async with origin.client.open_blob(origin.repository, blob.digest) as chunks:
            body = verified_stream(chunks, blob, on_bytes)
            await self.client.finish_upload(repository, session, blob.digest, blob.size, body)


def _consume_exception(task: asyncio.Task[BlobOutcome]) -> None:
    if not task.cancelled():
        task.exception()
