"""The connection pool's network backend: httpcore's own (anyio), with each connection's socket looked up once.

Whenever httpcore's pool hands out a connection, it asks every idle one whether its socket has become readable
(the server closed it). anyio answers each such lookup by building a table of its socket's attributes, and with
a few dozen connections that was a fifth of a no-op run's CPU. httpx does not take a network backend, so
`pool.pooled_transport` gives it to the pool it puts under httpx's transport; `tests/test_client.py` checks that
idle connections the server closed are still noticed."""

# ruff: noqa: ASYNC109  (the `timeout` parameters are httpcore's network-backend interface)
from __future__ import annotations

import socket
import ssl
from collections.abc import Iterable
from typing import Any

import httpcore
from httpcore._backends.anyio import AnyIOBackend
from httpcore._utils import is_socket_readable

SocketOption = tuple[int, int, int] | tuple[int, int, bytes | bytearray] | tuple[int, int, None, int]


class _Stream(httpcore.AsyncNetworkStream):
    def __init__(self, inner: httpcore.AsyncNetworkStream) -> None:
        self._inner = inner
        self._socket: socket.socket | None = inner.get_extra_info("socket")

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return await self._inner.read(max_bytes, timeout)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        await self._inner.write(buffer, timeout)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.AsyncNetworkStream:
        return _Stream(await self._inner.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:
        if info == "is_readable":
            return is_socket_readable(self._socket)
        if info == "socket":
            return self._socket
        return self._inner.get_extra_info(info)


class SocketBackend(httpcore.AsyncNetworkBackend):
    def __init__(self) -> None:
        self._inner = AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[SocketOption] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        return _Stream(await self._inner.connect_tcp(host, port, timeout, local_address, socket_options))

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[SocketOption] | None = None
    ) -> httpcore.AsyncNetworkStream:
        return _Stream(await self._inner.connect_unix_socket(path, timeout, socket_options))

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)
