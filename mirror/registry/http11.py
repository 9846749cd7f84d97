"""One HTTP/1.1 connection: h11's state machine over a socket stream from `sockets.py`.

h11 does the protocol (framing, chunked bodies, keep-alive rules); this file moves its bytes. A connection
carries one exchange at a time: `send` writes the request and returns the response's head, `body` yields the
response's bytes, and `finish` says whether the connection may carry another exchange. Failures are httpx's
exceptions: the socket stream raises them, and h11's protocol errors are turned into them."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import NamedTuple

import h11
import httpx

from mirror.registry.proxy import Proxy, answered
from mirror.registry.sockets import SocketStream

READ_SIZE = 64 * 1024  # bytes asked of the socket stream at a time
MAX_HEAD_BYTES = 100 * 1024  # a response's status line and headers


class Origin(NamedTuple):
    scheme: bytes
    host: bytes
    port: int


class Timeouts(NamedTuple):
    connect: float | None
    read: float | None
    write: float | None
    pool: float | None

    @classmethod
    def of(cls, request: httpx.Request) -> Timeouts:
        given = request.extensions.get("timeout", {})
        return cls(given.get("connect"), given.get("read"), given.get("write"), given.get("pool"))


class Http11Connection:
    """`forwarder`: the proxy the stream goes to, which takes each request whole (a plain-HTTP origin's)."""

    def __init__(
        self, origin: Origin, stream: SocketStream, keepalive_expiry: float | None, forwarder: Proxy | None = None
    ) -> None:
        self.origin = origin
        self.stream = stream
        self._forwarder = forwarder
        self._keepalive_expiry = keepalive_expiry
        self._h11 = h11.Connection(our_role=h11.CLIENT, max_incomplete_event_size=MAX_HEAD_BYTES)
        self._idle_until: float | None = None
        self.closed = False

    def fit_for_reuse(self, now: float) -> bool:
        """Idle, within its keep-alive time, and not closed by the server meanwhile: the socket stream knows that
        from what the loop has already read (an end of file, or bytes nobody asked for), with no system call."""
        expired = self._idle_until is not None and now >= self._idle_until
        return not (self.closed or expired or self.stream.is_readable)

    async def send(self, request: httpx.Request, timeouts: Timeouts) -> h11.Response:
        """Write `request` and read up to the response's head. A server may answer before it has read the whole
        body (a refusal) and close its side: the answer is still read."""
        self._idle_until = None
        target, headers = request.url.raw_path, request.headers.raw
        if self._forwarder is not None:  # the absolute form, which a proxy forwards, and the proxy's own login
            target = request.url.raw_scheme + b"://" + request.url.netloc + target
            if self._forwarder.authorization:
                headers = [*headers, (b"Proxy-Authorization", self._forwarder.authorization.encode("ascii"))]
        try:
            await self._write(h11.Request(method=request.method, target=target, headers=headers), timeouts)
            assert isinstance(request.stream, httpx.AsyncByteStream)  # the async client's requests
            async for piece in request.stream:
                await self._write(h11.Data(data=piece), timeouts)
            await self._write(h11.EndOfMessage(), timeouts)
        except httpx.WriteError:
            pass
        while True:
            event = await self._next_event(timeouts.read)
            if isinstance(event, h11.Response):
                if self._forwarder is not None and event.status_code == 407:  # the proxy's, never the origin's
                    asked = f"{request.method} {request.url.netloc.decode('ascii')}"
                    raise answered(self._forwarder, asked, 407, event.reason.decode("latin-1"))
                return event
            if not isinstance(event, h11.InformationalResponse):  # 1xx heads come before the answer
                raise httpx.RemoteProtocolError(f"unexpected {type(event).__name__} before the response")

    async def body(self, timeouts: Timeouts) -> AsyncIterator[bytes]:
        while True:
            event = await self._next_event(timeouts.read)
            if isinstance(event, h11.Data):
                yield bytes(event.data)
            elif isinstance(event, h11.EndOfMessage):
                return

    def finish(self) -> bool:
        """After the exchange: whether the connection can take the next one. A body left unread is read on only
        as far as h11 already holds it (a `HEAD`, an empty body, its last bytes), with no wait for more."""
        try:
            while self._h11.their_state is h11.SEND_BODY:
                event = self._h11.next_event()
                if event is h11.NEED_DATA:
                    return False
        except h11.RemoteProtocolError:
            return False
        if self._h11.our_state is not h11.DONE or self._h11.their_state is not h11.DONE:
            return False
        if self._h11.trailing_data[0]:  # bytes after the answer that nobody asked for (a body sent to a HEAD)
            return False
        self._h11.start_next_cycle()
        if self._keepalive_expiry is not None:
            self._idle_until = time.monotonic() + self._keepalive_expiry
        return True

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._h11.send_failed()
            self.stream.close()

    async def _write(self, event: h11.Event, timeouts: Timeouts) -> None:
        try:
            data = self._h11.send(event)
        except h11.LocalProtocolError as error:
            raise httpx.LocalProtocolError(str(error)) from error
        if data:
            await self.stream.write(data, timeouts.write)

    async def _next_event(self, read_timeout: float | None) -> h11.Event:
        while True:
            try:
                event = self._h11.next_event()
            except h11.RemoteProtocolError as error:
                raise httpx.RemoteProtocolError(str(error)) from error
            if event is not h11.NEED_DATA:
                assert not isinstance(event, type)  # PAUSED is a server's; a client is never paused
                return event
            data = await self.stream.read(READ_SIZE, read_timeout)
            if not data and self._h11.their_state is h11.SEND_RESPONSE:
                raise httpx.RemoteProtocolError("Server disconnected without sending a response.")
            self._h11.receive_data(data)
