"""Uploading one blob from the source to a target upload session: one streamed PUT, or, for large blobs,
PATCH chunks that resume from the offset the registry reports after a failure."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from typing import Protocol

from mirror.engine.stream import ExactReader, Hasher, check_digest, new_hasher, verified_stream
from mirror.errors import Kind, MirrorError
from mirror.oci import Descriptor
from mirror.registry import BlobBody, RegistryClient, RegistryError, RegistryUnreachable, UploadSession
from mirror.registry.auth import AuthError
from mirror.registry.errors import IntegrityError
from mirror.registry.uploads import UPLOAD_STEPS

log = logging.getLogger("mirror")
_NO_CHUNKS = frozenset({405, 501})


class BlobOrigin(Protocol):
    """Where a blob's bytes come from."""

    def open(self, blob: Descriptor, start: int = 0) -> AbstractAsyncContextManager[BlobBody]: ...


@dataclass(frozen=True, slots=True)
class RegistryOrigin:
    """A repository at the source registry."""

    client: RegistryClient
    repository: str

    def open(self, blob: Descriptor, start: int = 0) -> AbstractAsyncContextManager[BlobBody]:
        return self.client.open_blob(self.repository, blob.digest, start)


@dataclass
class CountingOrigin:
    """An origin that counts the bytes read through it, across every open: a transfer's progress, on which the
    retry policy's clock starts again (`retry_step`), so a long transfer is not out of retries for its length."""

    inner: BlobOrigin
    read: int = 0

    @asynccontextmanager
    async def open(self, blob: Descriptor, start: int = 0) -> AsyncIterator[BlobBody]:
        async with self.inner.open(blob, start) as body:
            yield BlobBody(self._counted(body.chunks), body.start)

    async def _counted(self, chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        async for chunk in chunks:
            self.read += len(chunk)
            yield chunk


@dataclass(frozen=True, slots=True)
class BlobUpload:
    """One blob going from `origin` into `repository` at `target`."""

    target: RegistryClient
    repository: str
    blob: Descriptor
    origin: BlobOrigin
    on_bytes: Callable[[int], None] | None = None


def is_transient(exc: BaseException) -> bool:
    """Worth another try: what its kind says may pass (the network, a registry's passing trouble, bytes that
    came wrong from the source), and, for an upload, a refused token under a streamed body or a session that
    is gone or out of step. A 416 is the target's upload session out of step only when an upload step got it:
    from the source's blob GET it says the Range asked for is past the blob's end, and would say it again."""
    if isinstance(exc, AuthError) or not isinstance(exc, MirrorError):
        return False
    if exc.transient:
        return True
    return isinstance(exc, RegistryError) and (
        exc.status == 401
        or (exc.status == 416 and exc.action in UPLOAD_STEPS)
        or exc.code in {"BLOB_UPLOAD_UNKNOWN", "BLOB_UPLOAD_INVALID"}
    )


async def upload_whole(upload: BlobUpload, session: UploadSession) -> None:
    """One PUT with the whole body, streamed from the source and checked as it passes."""
    async with upload.origin.open(upload.blob) as body:
        stream = verified_stream(body.chunks, upload.blob, upload.on_bytes)
        await upload.target.finish_upload(upload.repository, session, upload.blob.digest, upload.blob.size, stream)


class ChunkedUploadUnsupported(MirrorError):
    """The registry turned the first chunk down (405, 501, UNSUPPORTED): it takes a blob in one PUT only."""

    kind = Kind.REFUSED


@dataclass
class ChunkedUpload:
    """PATCH the blob in chunks. It keeps what the registry confirmed across attempts of the one retry loop
    (`retry_step`): the next attempt calls `resume` (ask the session how much arrived, or start a new
    session when it is gone) and sends from there, re-reading the source from the nearest confirmed offset
    (with a Range request where it can). A session that holds every byte, the whole blob's digest checked as
    its last chunk went, only needs its closing PUT: the source is not read again.

    The checkpoints' hashes come from the same reads as the bytes sent, so they vouch for nothing: a byte that
    came wrong from the source in an early chunk shows only at the last chunk's check. An IntegrityError
    therefore leaves no part of the session to resume: whoever retries starts a new session from the first
    byte (`_BlobTransfer` in blobs.py)."""

    upload: BlobUpload
    chunk_size: int
    session: UploadSession  # the latest confirmed session URL
    offset: int = 0  # bytes the registry confirmed
    marks: list[tuple[int, Hasher]] = field(default_factory=lambda: [(0, new_hasher())])
    checked: bool = False  # the whole blob hashed to its digest as its last byte went

    async def send(self) -> None:
        """Send from the confirmed offset to the end and complete the upload."""
        try:
            await self._send_from()
        except (RegistryError, RegistryUnreachable) as exc:
            if self._unsupported(exc):
                raise ChunkedUploadUnsupported(str(exc)) from exc
            log.info("chunk upload of %s failed at %d bytes (%s)", self.upload.blob.digest, self.offset, exc)
            raise
        await self.upload.target.finish_upload(self.upload.repository, self.session, self.upload.blob.digest, 0, b"")

    async def resume(self) -> None:
        """Where did the last attempt leave the session? Go on from there, or start over in a new one."""
        target, repository = self.upload.target, self.upload.repository
        status = await target.upload_status(repository, self.session)
        if status is None:
            log.info("upload session gone; starting a new one for %s", self.upload.blob.digest)
            fresh = await target.start_upload(repository)
            assert fresh is not None
            self.session, self.offset, self.marks, self.checked = fresh, 0, [(0, new_hasher())], False
        else:
            self.session, self.offset = status
            log.info("resuming the upload of %s at %d bytes", self.upload.blob.digest, self.offset)

    def _unsupported(self, exc: BaseException) -> bool:
        return (
            isinstance(exc, RegistryError)
            and self.offset == 0
            and (exc.status in _NO_CHUNKS or exc.code == "UNSUPPORTED")
        )

    async def _send_from(self) -> None:
        """Send from the confirmed offset to the end; `self.session` follows each confirmed chunk."""
        blob, origin = self.upload.blob, self.upload.origin
        if self.offset == blob.size and self.checked:
            return  # every byte is in the session, and they hashed to the digest: only the closing PUT is left
        self.checked = False  # until the bytes read this time check out
        mark, hasher = self._checkpoint()
        hasher = hasher.copy()
        async with origin.open(blob, start=mark) as body:
            reader = ExactReader(body.chunks)
            await reader.discard(mark - body.start)  # the source ignored Range: skip what it resent
            async for piece in reader.take(self.offset - mark):  # bytes the registry has: hash, do not send
                hasher.update(piece)
            if self.offset == blob.size:  # a session full of bytes whose check this upload never saw
                await self._check_whole(reader, hasher)
            while self.offset < blob.size:
                size = min(self.chunk_size, blob.size - self.offset)
                pieces = self._pieces(reader, size, hasher, last=self.offset + size == blob.size)
                session, received = await self.upload.target.upload_chunk(
                    self.upload.repository, self.session, self.offset, size, pieces
                )
                if received != self.offset + size:
                    raise RegistryError(
                        "upload chunk",
                        self.upload.target.where(self.upload.repository),
                        416,
                        "",
                        f"registry holds {received} bytes, expected {self.offset + size}",
                    )
                self.session, self.offset = session, received
                self.marks.append((self.offset, hasher.copy()))
                if self.upload.on_bytes:
                    self.upload.on_bytes(size)

    def _checkpoint(self) -> tuple[int, Hasher]:
        """The confirmed offset to read the source from, at or before `self.offset`, and the hash up to it. Never
        the blob's end: a blob's source has no bytes from there (a 416 for its Range), and the check of the
        whole digest needs some of them."""
        end = self.upload.blob.size
        usable = [m for m in self.marks if m[0] <= self.offset and (m[0] < end or m[0] == 0)]
        return max(usable, key=lambda m: m[0])

    async def _check_whole(self, reader: ExactReader, hasher: Hasher) -> None:
        """The source said no more than the blob, and all of it hashed to the blob's digest."""
        if not await reader.at_end():
            raise IntegrityError(f"blob {self.upload.blob.digest}: source sent more than it declares")
        check_digest(self.upload.blob, self.upload.blob.size, hasher)
        self.checked = True

    async def _pieces(self, reader: ExactReader, size: int, hasher: Hasher, last: bool) -> AsyncIterator[bytes]:
        """One chunk's bytes, hashed; the last chunk's final piece is held back until the digest checks out."""
        held: bytes | None = None
        async for piece in reader.take(size):
            hasher.update(piece)
            if held is not None:
                yield held
            held = piece
        if last:
            await self._check_whole(reader, hasher)
        if held is not None:
            yield held
