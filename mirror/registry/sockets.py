"""The connection pool's sockets: streams over asyncio's own transports and protocols, under mirror's HTTP/1.1
connections (`http11.py`): connect, read, write, start TLS, close; failures are httpx's exceptions.

httpcore's default backend under asyncio is anyio's: each read and write opens a cancel scope with its deadline
and yields to the loop once more before it starts, TLS is a second layer of Python over the socket stream, and
whether an idle connection was closed by the server is a `poll` of its socket. Here a connection is an
`asyncio.Protocol` that keeps what arrives as it came (nothing is copied but the slice a read takes): a read
finds its bytes there or waits for them with one timer, a write hands its bytes to the transport and waits only
when the transport asks to pause, TLS is asyncio's (`loop.start_tls`), and a connection the server closed while
idle is known from the protocol's state without a system call, since the loop reads every open socket as it
goes."""

# ruff: noqa: ASYNC109  (each read, write and connect takes its own `timeout`, as httpx's per-request timeouts give them)
from __future__ import annotations

import asyncio
import ssl
from asyncio.trsock import TransportSocket
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager

import httpx

HAPPY_EYEBALLS_DELAY = 0.25  # seconds before the next address is tried alongside (RFC 8305; anyio's too)
READ_AHEAD = 256 * 1024  # bytes buffered before the socket stops being read until a reader takes some


class _Connection(asyncio.Protocol):
    """One socket's events: bytes kept until read, end of file or loss, and the transport's write pressure."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self._chunks: deque[bytes] = deque()
        self._offset = 0  # into the first chunk: what a read has taken of it
        self.buffered = 0  # bytes arrived and not yet read
        self.ended = False  # the peer sent end of file, or the connection was lost
        self.lost: Exception | None = None
        self._reading_paused = False
        self._writing_paused = False
        self._wakers: list[asyncio.Future[None]] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self._chunks.append(data)
        self.buffered += len(data)
        if self.buffered > READ_AHEAD and self.transport is not None and not self._reading_paused:
            self._reading_paused = True
            self.transport.pause_reading()
        self._wake()

    def eof_received(self) -> bool:
        self.ended = True
        self._wake()
        return False  # close the transport: HTTP has nothing to send after the peer's end

    def connection_lost(self, exc: Exception | None) -> None:
        self.ended = True
        self.lost = exc
        self._writing_paused = False
        self._wake()

    def pause_writing(self) -> None:
        self._writing_paused = True

    def resume_writing(self) -> None:
        self._writing_paused = False
        self._wake()

    def take(self, max_bytes: int) -> bytes:
        head = self._chunks[0]
        if self._offset == 0 and len(head) <= max_bytes:
            chunk = self._chunks.popleft()
        else:
            end = self._offset + max_bytes
            chunk = head[self._offset : end]
            if end >= len(head):
                self._chunks.popleft()
                self._offset = 0
            else:
                self._offset = end
        self.buffered -= len(chunk)
        if self._reading_paused and self.buffered <= READ_AHEAD // 2 and self.transport is not None:
            self._reading_paused = False
            self.transport.resume_reading()
        return chunk

    @property
    def must_wait_to_write(self) -> bool:
        return self._writing_paused and not self.ended

    async def wait(self, deadline: float | None, on_timeout: type[Exception]) -> None:
        """Until the next event (bytes, end, loss, resumed writing), or `on_timeout` at `deadline` (loop time)."""
        loop = asyncio.get_running_loop()
        waker: asyncio.Future[None] = loop.create_future()
        self._wakers.append(waker)
        timer = None if deadline is None else loop.call_at(deadline, _expire, waker, on_timeout)
        try:
            await waker
        finally:
            if timer is not None:
                timer.cancel()
            if waker in self._wakers:
                self._wakers.remove(waker)

    def _wake(self) -> None:
        wakers, self._wakers = self._wakers, []
        for waker in wakers:
            if not waker.done():
                waker.set_result(None)


def _deadline(timeout: float | None) -> float | None:
    return None if timeout is None else asyncio.get_running_loop().time() + timeout


def _expire(waker: asyncio.Future[None], error: type[Exception]) -> None:
    if not waker.done():
        waker.set_exception(error("timed out"))


class SocketStream:
    def __init__(self, transport: asyncio.Transport, connection: _Connection) -> None:
        self._transport = transport
        self._connection = connection

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        connection = self._connection
        if not connection.buffered and not connection.ended:
            deadline = _deadline(timeout)
            while not connection.buffered and not connection.ended:
                await connection.wait(deadline, httpx.ReadTimeout)
        if connection.buffered:
            return connection.take(max_bytes)
        if connection.lost is not None:
            raise httpx.ReadError(str(connection.lost) or type(connection.lost).__name__) from connection.lost
        return b""

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not buffer:
            return
        if self._connection.ended or self._transport.is_closing():
            raise httpx.WriteError("the connection is closed")
        self._transport.write(buffer)
        if self._connection.must_wait_to_write:
            deadline = _deadline(timeout)
            while self._connection.must_wait_to_write:
                await self._connection.wait(deadline, httpx.WriteTimeout)
        if self._connection.lost is not None:
            raise httpx.WriteError(str(self._connection.lost)) from self._connection.lost

    def close(self) -> None:
        """At once: the loop flushes what was written and closes the socket; nothing here waits for it."""
        self._transport.close()

    async def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> SocketStream:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                upgraded = await loop.start_tls(
                    self._transport, self._connection, ssl_context, server_hostname=server_hostname
                )
        except TimeoutError as error:
            self._transport.abort()
            raise httpx.ConnectTimeout("TLS handshake timed out") from error
        except (OSError, ssl.SSLError) as error:
            self._transport.abort()
            raise httpx.ConnectError(f"TLS handshake: {str(error) or type(error).__name__}") from error
        if upgraded is None:  # the connection was lost during the handshake
            raise httpx.ConnectError("connection lost during the TLS handshake")
        assert isinstance(upgraded, asyncio.Transport)
        self._connection.transport = upgraded
        return SocketStream(upgraded, self._connection)

    @property
    def is_readable(self) -> bool:
        """Idle, whether the server closed the connection or sent what nobody asked for."""
        return self._connection.ended or self._connection.buffered > 0

    @property
    def transport_socket(self) -> TransportSocket:
        sock = self._transport.get_extra_info("socket")
        assert isinstance(sock, TransportSocket)
        return sock


class SocketBackend:
    async def connect_tcp(self, host: str, port: int, timeout: float | None = None) -> SocketStream:
        loop = asyncio.get_running_loop()
        with _connect_errors(f"{host}:{port}"):
            async with asyncio.timeout(timeout):
                transport, connection = await loop.create_connection(
                    _Connection, host, port, happy_eyeballs_delay=HAPPY_EYEBALLS_DELAY
                )
        return SocketStream(transport, connection)


@contextmanager
def _connect_errors(where: str) -> Iterator[None]:
    """A connection attempt's failures as httpx's: its deadline passed, or the system refused it."""
    try:
        yield
    except TimeoutError as error:
        raise httpx.ConnectTimeout(f"connecting to {where} timed out") from error
    except OSError as error:
        raise httpx.ConnectError(str(error)) from error
