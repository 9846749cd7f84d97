"""The connection pool and the transport under every registry client: HTTP/1.1 keep-alive connections
(`http11.py`) over asyncio's sockets (`sockets.py`), with no other layer between them and httpx.

httpx's own transport sits on httpcore's pool, which under asyncio takes every lock, event and cancel shield
from anyio: about 20 ms to load anyio's backend before the first request of every run, and 5% of a no-op's CPU
in those objects. Its pool also walks every connection and every waiting request whenever one comes or goes
(encode/httpcore#1035). Here a request takes an idle connection to its origin (the most recent first), else
opens one while under the limit, else closes the oldest idle connection to another origin to make room, else
waits its turn; an answered request hands its connection back, or closes it when the exchange cannot be
followed by another (an unread body, `Connection: close`, an error).

HTTP/2 (`registries.<host>.http2`) is httpx's own transport: one multiplexed connection per host needs none of
this, and it is opt-in (it loses to HTTP/1.1 in the benchmark). httpcore (with h2 and anyio) is imported only
then: about 30 ms of every run's start-up otherwise."""

from __future__ import annotations

import asyncio
import functools
import ssl
import time
from collections import deque
from collections.abc import AsyncIterator

import httpx

from mirror.registry.http11 import Http11Connection, Origin, Timeouts
from mirror.registry.proxy import DIRECT, Proxy, ProxyRouting, ProxyRules, open_tunnel
from mirror.registry.sockets import SocketBackend, SocketStream
from mirror.registry.socks import open_socks_tunnel
from mirror.registry.tls import tls_context

DEFAULT_PORTS = {b"http": 80, b"https": 443}


def pooled_transport(
    limits: httpx.Limits, verify: bool, http2: bool, proxies: ProxyRules = DIRECT
) -> httpx.AsyncBaseTransport:
    if http2:
        return http2_transport(limits, verify, proxies)
    return PooledTransport(
        ConnectionPool(
            verify,
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            proxies=proxies,
        )
    )


def http2_transport(limits: httpx.Limits, verify: bool, proxies: ProxyRules) -> httpx.AsyncBaseTransport:
    """httpx's own transport, and one through each proxy the rules name: a registry's client also reaches its
    token realm and blob redirects, which the rules may send another way."""

    def transport(proxy: Proxy | None) -> httpx.AsyncHTTPTransport:
        through = None
        if proxy is not None and proxy.socks:
            through = httpx.Proxy(proxy.url, auth=proxy.login)
        elif proxy is not None:  # from its parts: the login goes as a header, never through httpx's URL parsing
            login = {"Proxy-Authorization": proxy.authorization} if proxy.authorization else None
            through = httpx.Proxy(proxy.url, headers=login)
        context = tls_context(verify, http2=True)
        return httpx.AsyncHTTPTransport(limits=limits, verify=context, http2=True, proxy=through)

    if proxies == DIRECT:
        return transport(None)
    return ProxyRouting(proxies, transport)


class ConnectionPool:
    """Connections per origin, at most `max_connections` open (idle or not) and `max_keepalive_connections` idle,
    each idle one for at most `keepalive_expiry` seconds."""

    def __init__(
        self,
        verify: bool = True,
        max_connections: int | None = None,
        max_keepalive_connections: int | None = None,
        keepalive_expiry: float | None = None,
        backend: SocketBackend | None = None,
        proxies: ProxyRules = DIRECT,
    ) -> None:
        self._verify = verify
        self._max_connections = max_connections if max_connections is not None else float("inf")
        self._max_idle = max_keepalive_connections if max_keepalive_connections is not None else float("inf")
        self._keepalive_expiry = keepalive_expiry
        self._backend = backend or SocketBackend()
        self._proxies = proxies
        self._idle: list[Http11Connection] = []  # oldest first
        self._open = 0  # connections open, or being opened, idle or not
        self._waiting: deque[asyncio.Future[None]] = deque()
        self._woken = 0  # requests woken from the queue that have not yet run again
        self._closed = False

    @functools.cached_property
    def ssl_context(self) -> ssl.SSLContext:
        """Made at the first TLS connection: a pool that only ever speaks plain HTTP (a plain-HTTP registry and
        its realm) never loads the CA bundle, and one that meets an https origin checks its certificate."""
        context = tls_context(self._verify)
        context.set_alpn_protocols(["http/1.1"])
        return context

    @property
    def idle(self) -> list[Http11Connection]:
        return list(self._idle)

    @property
    def open_connections(self) -> int:
        return self._open

    async def acquire(self, origin: Origin, timeouts: Timeouts, sni_hostname: str | None = None) -> Http11Connection:
        deadline = None if timeouts.pool is None else asyncio.get_running_loop().time() + timeouts.pool
        while True:
            if self._closed:
                raise httpx.PoolTimeout("the connection pool is closed")
            reused = self._reusable(origin)
            if reused is not None:
                return reused
            if self._open < self._max_connections or self._make_room():
                return await self._opened(origin, timeouts, sni_hostname)
            await self._wait_turn(deadline)

    def release(self, connection: Http11Connection) -> None:
        """The exchange on `connection` is over: back to the idle ones if it can take another, else closed."""
        if self._closed or not connection.finish():
            self.discard(connection)
            return
        self._idle.append(connection)
        if not (self._waiting or self._woken):  # else the waiting take the idle ones first
            while len(self._idle) > self._max_idle:
                self.discard(self._idle.pop(0))
        self._wake_one()

    def close(self) -> None:
        self._closed = True
        for connection in self._idle:
            self.discard(connection, wake=False)
        self._idle.clear()
        while self._waiting:  # each finds the pool closed
            self._wake_one()

    def _reusable(self, origin: Origin) -> Http11Connection | None:
        """The most recently used idle connection to `origin` that is fit for reuse; unfit ones on the way are
        closed."""
        now = time.monotonic()
        for index in range(len(self._idle) - 1, -1, -1):
            connection = self._idle[index]
            if connection.origin != origin:
                continue
            del self._idle[index]
            if connection.fit_for_reuse(now):
                return connection
            self.discard(connection)
        return None

    def _make_room(self) -> bool:
        """Close the oldest idle connection (to another origin: `_reusable` took this one's) to open one."""
        if not self._idle:
            return False
        self.discard(self._idle.pop(0), wake=False)  # the room is this request's
        return True

    async def _opened(self, origin: Origin, timeouts: Timeouts, sni_hostname: str | None) -> Http11Connection:
        self._open += 1
        try:
            context = self.ssl_context if origin.scheme == b"https" else None  # before a socket is opened for it
            stream, forwarder = await self._connected(origin, timeouts.connect)
            if context is not None:
                host = sni_hostname or origin.host.decode("ascii")
                stream = await stream.start_tls(context, host, timeout=timeouts.connect)
        except BaseException:
            self._open -= 1
            self._wake_one()
            raise
        return Http11Connection(origin, stream, self._keepalive_expiry, forwarder)

    async def _connected(self, origin: Origin, connect_timeout: float | None) -> tuple[SocketStream, Proxy | None]:
        """A stream to `origin`: straight there, else to the proxy the rules name for it, through its CONNECT
        tunnel for HTTPS; a plain-HTTP origin's requests are sent to the proxy whole (the proxy returned with the
        stream), as Go's client and curl send them: proxies commonly allow CONNECT to port 443 only. A SOCKS5
        proxy's tunnel carries every origin."""
        host, port = origin.host.decode("ascii"), origin.port
        proxy = self._proxies.for_origin(origin.scheme.decode("ascii"), host, port)
        if proxy is None:
            return await self._backend.connect_tcp(host, port, timeout=connect_timeout), None
        try:
            stream = await self._backend.connect_tcp(proxy.host, proxy.port, timeout=connect_timeout)
        except httpx.ConnectError as error:  # the system's words do not say which address refused
            raise type(error)(f"proxy {proxy}: {error}") from error
        if origin.scheme == b"http" and not proxy.socks:
            return stream, proxy
        try:
            await (open_socks_tunnel if proxy.socks else open_tunnel)(stream, proxy, host, port, connect_timeout)
        except BaseException:
            stream.close()
            raise
        return stream, None

    async def _wait_turn(self, deadline: float | None) -> None:
        waiter = asyncio.get_running_loop().create_future()
        self._waiting.append(waiter)
        try:
            async with asyncio.timeout_at(deadline):
                await waiter
        except BaseException as error:
            if waiter in self._waiting:
                self._waiting.remove(waiter)
            elif waiter.done() and not waiter.cancelled():
                self._woken -= 1
                self._wake_one()  # woken, but not taking its turn: the next in line does
            if isinstance(error, TimeoutError):
                raise httpx.PoolTimeout("no connection came free in time") from None
            raise
        self._woken -= 1

    def discard(self, connection: Http11Connection, wake: bool = True) -> None:
        """Close `connection` (an exchange failed, or it is not fit to keep) and free its place."""
        if not connection.closed:
            connection.close()
            self._open -= 1
            if wake:
                self._wake_one()

    def _wake_one(self) -> None:
        while self._waiting:
            waiter = self._waiting.popleft()
            if not waiter.done():
                waiter.set_result(None)
                self._woken += 1
                return


class PooledTransport(httpx.AsyncBaseTransport):
    def __init__(self, pool: ConnectionPool) -> None:
        self.pool = pool

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        if url.raw_scheme not in DEFAULT_PORTS:  # a redirect followed to ftp:// or file://, say
            raise httpx.UnsupportedProtocol(f"{url.scheme}:// is not HTTP: not followed")
        origin = Origin(url.raw_scheme, url.raw_host, url.port or DEFAULT_PORTS[url.raw_scheme])
        timeouts = Timeouts.of(request)
        connection = await self.pool.acquire(origin, timeouts, request.extensions.get("sni_hostname"))
        try:
            head = await connection.send(request, timeouts)
        except BaseException:
            self.pool.discard(connection)
            raise
        return httpx.Response(
            head.status_code,
            headers=head.headers.raw_items(),
            stream=_ResponseBody(self.pool, connection, timeouts),
            extensions={"http_version": b"HTTP/" + head.http_version, "reason_phrase": head.reason},
        )

    async def aclose(self) -> None:
        self.pool.close()


class _ResponseBody(httpx.AsyncByteStream):
    def __init__(self, pool: ConnectionPool, connection: Http11Connection, timeouts: Timeouts) -> None:
        self._pool = pool
        self._connection: Http11Connection | None = connection
        self._timeouts = timeouts

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if self._connection is None:
            raise httpx.StreamClosed()
        try:
            async for piece in self._connection.body(self._timeouts):
                yield piece
        except BaseException:
            self._release()  # an unfinished body: the connection is closed, not reused
            raise

    async def aclose(self) -> None:
        self._release()

    def _release(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            self._pool.release(connection)
