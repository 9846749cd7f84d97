"""Byte streams checked as they pass: sha256 and size against a descriptor, and exact-size reads."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Callable
from typing import Any

from mirror.oci import Descriptor
from mirror.registry.errors import IntegrityError

Hasher = Any  # hashlib's sha256 object has no public type


def new_hasher() -> Hasher:
    return hashlib.sha256()


def check_digest(blob: Descriptor, size: int, hasher: Hasher, sender: str = "source") -> None:
    """The bytes `sender` sent (the source, or the target whose copy is checked) are the blob's."""
    digest = "sha256:" + hasher.hexdigest()
    if size != blob.size or digest != blob.digest:
        raise IntegrityError(
            f"blob {blob.digest}: {sender} sent {size} bytes hashing to {digest}, expected {blob.size} bytes"
        )


async def verified_stream(
    chunks: AsyncIterator[bytes],
    blob: Descriptor,
    on_bytes: Callable[[int], None] | None = None,
    sender: str = "source",
) -> AsyncIterator[bytes]:
    """Pass the bytes through, hashing them, and hold the last chunk back until size and sha256 check out:
    an upload whose bytes do not match its digest is never completed. `sender` names where they come from in
    the failure."""
    hasher = new_hasher()
    size = 0
    held: bytes | None = None
    async for chunk in chunks:
        if not chunk:
            continue
        size += len(chunk)
        if size > blob.size:
            raise IntegrityError(
                f"blob {blob.digest}: {sender} sent more than the {blob.size} bytes the descriptor declares"
            )
        hasher.update(chunk)
        if held is not None:
            yield held
            if on_bytes:
                on_bytes(len(held))
        held = chunk
    check_digest(blob, size, hasher, sender)
    if held is not None:
        yield held
        if on_bytes:
            on_bytes(len(held))


class ExactReader:
    """Reads exact byte counts from a stream of chunks of any size."""

    def __init__(self, chunks: AsyncIterator[bytes]) -> None:
        self._chunks = chunks
        self._buffer = b""

    async def take(self, count: int) -> AsyncIterator[bytes]:
        while count > 0:
            if not self._buffer:
                try:
                    self._buffer = await anext(self._chunks)
                except StopAsyncIteration:
                    raise IntegrityError(f"source stream ended {count} bytes early") from None
                continue
            piece, self._buffer = self._buffer[:count], self._buffer[count:]
            count -= len(piece)
            yield piece

    async def discard(self, count: int) -> None:
        async for _ in self.take(count):
            pass

    async def at_end(self) -> bool:
        if self._buffer:
            return False
        async for chunk in self._chunks:
            if chunk:
                self._buffer = chunk
                return False
        return True
