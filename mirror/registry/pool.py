"""The connection pool: httpcore's, with the pass that hands connections to waiting requests made linear.

httpcore 1.0 runs that pass whenever a request joins or leaves the pool, and in it counts every connection
again for each idle one and filters every connection again for each waiting request (encode/httpcore#1035):
with 16 connections, a million `is_idle` calls in a no-op run of 50 images, a quarter of its CPU.
`LinearPool` makes the same choices from one walk of the connections: drop the closed ones, close the
expired ones and idle ones past the keep-alive limit, then give each waiting request the first available
connection to its origin, else a new connection while under the limit, else one made in place of the oldest
idle connection. One fix to httpcore's behaviour comes with it: the keep-alive limit counts idle connections,
not all of them (the same issue); mirror sets it to the pool's size, so neither version ever closed one.

Two more changes of httpcore's behaviour, both found in a 20-image no-op (580 requests):
- An idle HTTP/1.1 connection handed to a request stays idle until that request's task runs, and httpcore hands
  it to the next request as well (or closes it to make room); the request that loses is refused by the
  connection and queues again. 2,400 such refusals, each another pass; `LinearPool` keeps it for the first.
- httpcore asks every idle connection in every pass whether the server has closed it (88,000 times; with
  httpcore's own network backend each is a `poll` of the socket, with `sockets.py` a look at the connection's
  state); `LinearPool` asks it of a connection about to be handed out, and of the others in a sweep at most once
  every `SWEEP_SECONDS`.
- When a request leaves and none is waiting, httpcore walks the pool anyway (half the walks of a no-op); the walk
  then waits for the next request to join, or for the sweep."""

from __future__ import annotations

import time

import httpcore
import httpx
from httpcore._async.interfaces import AsyncConnectionInterface as Connection

from mirror.registry.sockets import SocketBackend
from mirror.registry.tls import tls_context

SWEEP_SECONDS = 1.0  # how stale an idle connection's "still open?" answer may be when it is not handed out


def pooled_transport(limits: httpx.Limits, verify: bool, http2: bool) -> httpx.AsyncHTTPTransport:
    """httpx's transport over a `LinearPool` whose connections `SocketBackend` makes. httpx takes neither a
    pool nor a network backend, so the pool it built (unused: no connection yet) is replaced by one made with the
    same TLS context and limits."""
    transport = httpx.AsyncHTTPTransport(limits=limits, verify=tls_context(verify, http2), http2=http2)
    built = transport._pool
    assert isinstance(built, httpcore.AsyncConnectionPool) and not built.connections
    transport._pool = LinearPool(
        ssl_context=built._ssl_context,
        max_connections=limits.max_connections,
        max_keepalive_connections=limits.max_keepalive_connections,
        keepalive_expiry=limits.keepalive_expiry,
        http1=True,
        http2=http2,
        network_backend=SocketBackend(),
    )
    return transport


class LinearPool(httpcore.AsyncConnectionPool):
    _swept_at = float("-inf")

    def _assign_requests_to_connections(self) -> list[Connection]:
        queued = [request for request in self._requests if request.is_queued()]
        if not queued and not self._sweep_due():
            return []  # a request left and none waits: the walk can wait for the next one to join, or the sweep
        closing, free, idle = self._walk_connections()
        for pool_request in queued:
            origin = pool_request.request.url.origin
            reused = self._usable(origin, free, idle, closing)
            if reused is not None:
                pool_request.assign_to_connection(reused)
                if _exclusive(reused):
                    free.remove(reused)
                if reused in idle:  # spoken for: not to be closed for another origin in this pass
                    idle.remove(reused)
                continue
            if len(self._connections) >= self._max_connections:
                if not idle:
                    continue  # the request waits for a connection to come back
                _close(idle[0], closing, self._connections, free, idle)
            connection = self.create_connection(origin)
            self._connections.append(connection)
            pool_request.assign_to_connection(connection)
            if connection.is_available():  # an HTTP/2 connection to be: later requests share it
                free.append(connection)
        return closing

    def _walk_connections(self) -> tuple[list[Connection], list[Connection], list[Connection]]:
        """One walk of the pool: the connections to close (expired, found in a sweep, and idle ones past the
        keep-alive limit), those free to take a request now, and the idle ones that may be closed to make room.
        Closed connections are dropped.

        A connection already handed to a request that has not yet started on it is spoken for: idle, httpcore
        would hand it out again (the later request, refused by the connection, queues for another pass) or close
        it to make room."""
        spoken_for = {request.connection for request in self._requests if request.connection is not None}
        sweep = self._sweep_due()
        if sweep:
            self._swept_at = time.monotonic()
        closing: list[Connection] = []
        kept: list[Connection] = []
        free: list[Connection] = []
        idle: list[Connection] = []
        for connection in self._connections:
            if connection.is_closed():
                continue
            spoken = connection in spoken_for
            if sweep and not spoken and connection.has_expired():
                closing.append(connection)
                continue
            kept.append(connection)
            if connection.is_available() and not (spoken and _exclusive(connection)):
                free.append(connection)
            if not spoken and connection.is_idle():
                idle.append(connection)
        for surplus in idle[: max(0, len(idle) - self._max_keepalive_connections)]:
            _close(surplus, closing, kept, free, idle)
        self._connections = kept
        return closing, free, idle

    def _sweep_due(self) -> bool:
        return time.monotonic() - self._swept_at >= SWEEP_SECONDS

    def _usable(
        self, origin: httpcore.Origin, free: list[Connection], idle: list[Connection], closing: list[Connection]
    ) -> Connection | None:
        """The first free connection to `origin` that has neither expired nor been closed by the server; those
        found so on the way are taken out of the pool."""
        for connection in [c for c in free if c.can_handle_request(origin)]:
            if not connection.has_expired():
                return connection
            _close(connection, closing, self._connections, free, idle)
        return None


def _close(connection: Connection, closing: list[Connection], *pooled: list[Connection]) -> None:
    """Take `connection` out of the pool's lists for this pass and into `closing`."""
    for connections in pooled:
        if connection in connections:
            connections.remove(connection)
    closing.append(connection)


def _exclusive(connection: Connection) -> bool:
    """An idle HTTP/1.1 connection: handed to one request, it can take no other until that one is done."""
    return connection.is_idle() and "HTTP/2" not in connection.info()
