"""A response body read up to a limit: the one place where bytes from a server are gathered into memory
(manifests, tag pages, small blobs, chart repository files, token answers, error bodies)."""

from __future__ import annotations

import zlib
from collections.abc import AsyncIterator

import httpx

from mirror.untrusted import is_number

# The codings asked for: the two body.py decodes as they arrive. httpx would also offer br and zstd wherever
# their packages happen to be installed, and read_limited refuses those.
ACCEPTED_CODINGS = "gzip, deflate"


class BodyTooLarge(Exception):
    """A body over its limit: `5000 bytes (limit 4096)` when its Content-Length said so before a byte was
    read, else `over 4096 bytes`. Callers turn it into their own error, naming what they were reading."""

    def __init__(self, limit: int, declared: int | None = None) -> None:
        super().__init__(f"{declared} bytes (limit {limit})" if declared is not None else f"over {limit} bytes")


def released(response: httpx.Response) -> httpx.Response:
    """`response`, once closed, without the stream httpx bound to it. httpx's Response and that stream refer to
    each other (encode/httpx#3733), so every response, with its body and its request's, waited for the cyclic
    garbage collector: at 50 images, 81 blob bodies (16 MB) were held at once where 4 were in use. A closed
    response never reads its stream again."""
    if response.is_closed:
        response.stream = _RELEASED
    return response


_RELEASED = httpx.ByteStream(b"")


async def read_limited(
    response: httpx.Response, limit: int, *, truncate: bool = False, keep: bool = False, raw: bool = False
) -> bytes:
    """The body, at most `limit` bytes as decoded (an answer already in memory is measured, not read again).
    Over the limit, declared or as it arrives: BodyTooLarge; with `truncate`, the first `limit` bytes (an
    error body, which is only shown: one that does not decode ends where it stops decoding). With `keep`, the
    body stays readable in the response: httpx reads an auth flow's answers again once the flow moves on, so it
    is read by httpx itself. Either way it is decoded here, as it arrives, never past the limit: httpx would
    decode a whole coded body before it could be measured, and a few hundred KB of gzip can stand for gigabytes.

    With `raw`, the bytes as they came, whatever Content-Encoding the answer names: a blob, whose digest is
    over its stored bytes, read from an unread answer (a storage host that labels a stored .tar.gz
    `Content-Encoding: gzip` would otherwise have it unpacked)."""
    declared = response.headers.get("Content-Length", "")
    if is_number(declared) and int(declared) > limit and not truncate:
        raise BodyTooLarge(limit, int(declared))
    if not response.is_stream_consumed and isinstance(response.stream, httpx.AsyncByteStream):
        decoder = None if raw else _decoder_for(response, truncate)
        response.stream = _WireLimit(response.stream, limit, truncate, decoder)
        if keep:
            await response.aread()
    body = bytearray()
    async for chunk in response.aiter_raw() if raw else response.aiter_bytes():
        body += chunk
        if len(body) > limit:
            if truncate:
                return bytes(body[:limit])
            raise BodyTooLarge(limit)
    return bytes(body)


def _decoder_for(response: httpx.Response, truncate: bool) -> _Decompressor | _Dropped | None:
    """The decoder for the body's coding, which is taken out of the headers (httpx then leaves the bytes as they
    are). A coding mirror cannot bound (anything but gzip or deflate, never asked for) refuses the body, or, for
    an error body that is only shown, drops it."""
    encoding = response.headers.pop("Content-Encoding", "identity").strip().lower()
    if encoding in ("identity", ""):
        return None
    if encoding in ("gzip", "x-gzip", "deflate"):
        return _Decompressor(encoding)
    if truncate:
        return _Dropped()
    raise httpx.DecodingError(f"a body coded as {encoding!r}, which was not asked for", request=response.request)


class _WireLimit(httpx.AsyncByteStream):
    """A response stream decoded and refused past `limit` bytes as they arrive; with `truncate`, ended there
    instead (the rest is never read: closing the stream early closes its connection)."""

    def __init__(
        self, inner: httpx.AsyncByteStream, limit: int, truncate: bool, decoder: _Decompressor | _Dropped | None
    ) -> None:
        self.inner = inner
        self.limit = limit
        self.truncate = truncate
        self.decoder = decoder

    async def __aiter__(self) -> AsyncIterator[bytes]:
        seen = 0
        async for chunk in self.inner:
            for piece in self._decoded(chunk, self.limit - seen):
                if seen + len(piece) > self.limit:
                    if not self.truncate:
                        raise BodyTooLarge(self.limit)
                    yield piece[: self.limit - seen]
                    return
                seen += len(piece)
                yield piece

    def _decoded(self, chunk: bytes, room: int) -> list[bytes]:
        if self.decoder is None:
            return [chunk]
        pieces: list[bytes] = []
        try:
            while chunk and room >= 0:
                piece = self.decoder.decompress(chunk, room + 1)  # one byte over the room tells it is over
                pieces.append(piece)
                room -= len(piece)
                chunk = self.decoder.unconsumed_tail
        except zlib.error as exc:
            if not self.truncate:
                raise httpx.DecodingError(f"the body does not decode: {exc}") from None
            self.decoder = _Dropped()  # an error body, only shown: its status and headers are the answer
        return pieces

    async def aclose(self) -> None:
        await self.inner.aclose()


class _Decompressor:
    """gzip or deflate (a zlib stream, or raw deflate as some servers send it), as httpx decodes them."""

    def __init__(self, encoding: str) -> None:
        wbits = zlib.MAX_WBITS | 16 if encoding in ("gzip", "x-gzip") else zlib.MAX_WBITS
        self._inner = zlib.decompressobj(wbits)
        self._may_be_raw = encoding == "deflate"  # until the first bytes decode as a zlib stream, or do not

    @property
    def unconsumed_tail(self) -> bytes:
        return self._inner.unconsumed_tail

    def decompress(self, data: bytes, max_length: int) -> bytes:
        if self._may_be_raw:
            self._may_be_raw = False
            try:
                return self._inner.decompress(data, max_length)
            except zlib.error:
                self._inner = zlib.decompressobj(-zlib.MAX_WBITS)
        return self._inner.decompress(data, max_length)


class _Dropped:
    """An error body in a coding mirror does not read: it decodes to nothing."""

    unconsumed_tail = b""

    def decompress(self, data: bytes, max_length: int) -> bytes:
        return b""
