"""The pool's network backend (registry/sockets.py) against real TCP peers on loopback: reads, end of file,
a reset, a peer that never answers, a peer that stops reading, and socket options."""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
from asyncio.trsock import TransportSocket
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import httpx
import pytest

from mirror.demo.ports import free_port
from mirror.registry.sockets import SocketBackend

Peer = Callable[[socket.socket], None]


@contextmanager
def tcp_peer(behave: Peer) -> Iterator[int]:
    """A listening socket whose one accepted connection `behave` handles in a thread; yields its port."""
    listener = socket.create_server(("127.0.0.1", 0))
    done = threading.Event()

    def accept() -> None:
        connection, _ = listener.accept()
        try:
            behave(connection)
        finally:
            done.wait(60)  # the test says when the peer may go
            connection.close()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        done.set()
        thread.join(60)
        listener.close()


def test_a_read_returns_what_arrived_then_the_end_and_an_idle_stream_reports_the_peer_gone() -> None:
    def answer_and_close(connection: socket.socket) -> None:
        assert connection.recv(100) == b"ping"
        connection.sendall(b"pong")
        connection.shutdown(socket.SHUT_WR)

    async def talk(port: int) -> tuple[bytes, bool, bytes, bytes, bool, bool]:
        stream = await SocketBackend().connect_tcp("127.0.0.1", port, timeout=30)
        before = stream.is_readable
        await stream.write(b"ping", timeout=30)
        first = await stream.read(2, timeout=30)
        rest = await stream.read(100, timeout=30)
        end = await stream.read(100, timeout=30)
        after = stream.is_readable
        released = await _released_within(stream.transport_socket, 30)
        stream.close()
        return first, before, rest, end, after, released

    with tcp_peer(answer_and_close) as port:
        first, before, rest, end, after, released = asyncio.run(talk(port))
    assert (first, rest, end) == (b"po", b"ng", b"")
    assert before is False  # nothing arrived yet: an idle connection the server keeps
    assert after is True  # the server's end of file arrived: the pool drops such a connection
    assert released  # and its socket is closed by then, before the pool ever looks at it again


async def _released_within(sock: TransportSocket, seconds: float) -> bool:
    """The loop closed `sock` (asyncio's transport socket: its descriptor reads -1 once closed) within `seconds`."""
    for _ in range(int(seconds / 0.01)):
        if sock.fileno() == -1:
            return True
        await asyncio.sleep(0.01)
    return False


def test_a_reset_connection_is_a_read_error() -> None:
    def reset(connection: socket.socket) -> None:
        connection.recv(100)
        connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        connection.close()  # with a zero linger: RST, not FIN

    async def talk(port: int) -> None:
        stream = await SocketBackend().connect_tcp("127.0.0.1", port, timeout=30)
        await stream.write(b"ping", timeout=30)
        try:
            await stream.read(100, timeout=30)
        finally:
            stream.close()

    with tcp_peer(reset) as port, pytest.raises(httpx.ReadError):
        asyncio.run(talk(port))


def test_a_peer_that_never_answers_is_a_read_timeout() -> None:
    async def talk(port: int) -> None:
        stream = await SocketBackend().connect_tcp("127.0.0.1", port, timeout=30)
        try:
            await stream.read(100, timeout=0.2)
        finally:
            stream.close()

    with tcp_peer(lambda connection: None) as port, pytest.raises(httpx.ReadTimeout):
        asyncio.run(talk(port))


def test_a_peer_that_stops_reading_holds_the_writer_back_and_the_write_times_out() -> None:
    """Writes wait while the transport's buffer is full: what the writer handed over stays bounded (socket
    buffers and the transport's high-water mark), and the write waiting for room times out."""
    chunk = b"x" * (64 * 1024)
    written: list[int] = []

    async def flood(port: int) -> None:
        stream = await SocketBackend().connect_tcp("127.0.0.1", port, timeout=30)
        try:
            for _ in range(4096):  # 256 MiB, far past any socket buffer
                await stream.write(chunk, timeout=0.5)
                written.append(len(chunk))
        finally:
            stream.close()

    with tcp_peer(lambda connection: None) as port, pytest.raises(httpx.WriteTimeout):
        asyncio.run(flood(port))
    assert 0 < sum(written) < 64 * 1024 * 1024


def test_a_refused_connection_is_a_connect_error() -> None:
    port = free_port()  # nothing listens there, and no other test's server is handed it
    with pytest.raises(httpx.ConnectError):
        asyncio.run(SocketBackend().connect_tcp("127.0.0.1", port, timeout=30))
