"""The connection pool: httpcore's, with the pass that hands connections to waiting requests made linear.

httpcore 1.0 runs that pass whenever a request joins or leaves the pool, and in it counts every connection
again for each idle one and filters every connection again for each waiting request (encode/httpcore#1035):
with 16 connections, a million `is_idle` calls in a no-op run of 50 images, a quarter of its CPU.
`LinearPool` makes the same choices from one walk of the connections: drop the closed ones, close the
expired ones and idle ones past the keep-alive limit, then give each waiting request the first available
connection to its origin, else a new connection while under the limit, else one made in place of the oldest
idle connection. One fix to httpcore's behaviour comes with it: the keep-alive limit counts idle connections,
not all of them (the same issue); mirror sets it to the pool's size, so neither version ever closed one."""

from __future__ import annotations

import httpcore
import httpx
from httpcore._async.interfaces import AsyncConnectionInterface

from mirror.registry.sockets import SocketBackend
from mirror.registry.tls import tls_context


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
    def _assign_requests_to_connections(self) -> list[AsyncConnectionInterface]:
        closing = self._drop_closed_expired_and_surplus()
        available = [connection for connection in self._connections if connection.is_available()]
        idle = [connection for connection in self._connections if connection.is_idle()]
        for pool_request in [request for request in self._requests if request.is_queued()]:
            origin = pool_request.request.url.origin
            reused = next((c for c in available if c.can_handle_request(origin)), None)
            if reused is not None:
                pool_request.assign_to_connection(reused)
                if reused in idle:  # spoken for: not to be closed for another origin in this pass
                    idle.remove(reused)
                continue
            if len(self._connections) >= self._max_connections:
                if not idle:
                    continue  # the request waits for a connection to come back
                replaced = idle.pop(0)
                self._connections.remove(replaced)
                if replaced in available:
                    available.remove(replaced)
                closing.append(replaced)
            connection = self.create_connection(origin)
            self._connections.append(connection)
            pool_request.assign_to_connection(connection)
            if connection.is_available():  # an HTTP/2 connection to be: later requests share it
                available.append(connection)
        return closing

    def _drop_closed_expired_and_surplus(self) -> list[AsyncConnectionInterface]:
        closing: list[AsyncConnectionInterface] = []
        kept: list[AsyncConnectionInterface] = []
        for connection in self._connections:
            if connection.is_closed():
                continue
            if connection.has_expired():
                closing.append(connection)
            else:
                kept.append(connection)
        surplus = sum(1 for connection in kept if connection.is_idle()) - self._max_keepalive_connections
        for connection in list(kept):
            if surplus <= 0:
                break
            if connection.is_idle():
                kept.remove(connection)
                closing.append(connection)
                surplus -= 1
        self._connections = kept
        return closing
