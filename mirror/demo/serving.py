"""Small HTTP(S) servers on background threads for the demo's and the tests' stand-ins (chart repositories,
token realms, fronts, a CDN).

TLS is negotiated in each connection's own thread, with a time limit, never in the accepting thread: a client
that connects and then says nothing (a request cancelled between its TCP connect and its TLS hello) would
otherwise hold the accept loop, and every later connection would wait in the backlog."""

from __future__ import annotations

import http.server
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

HANDSHAKE_TIMEOUT = 30.0


class ThreadedServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    tls: ssl.SSLContext | None = None

    def finish_request(self, request: Any, client_address: Any) -> None:
        if self.tls is None:
            super().finish_request(request, client_address)
            return
        request.settimeout(HANDSHAKE_TIMEOUT)
        try:
            secured = self.tls.wrap_socket(request, server_side=True)
        except (OSError, ssl.SSLError):
            return  # a client that hung up or never spoke TLS
        secured.settimeout(None)
        try:
            super().finish_request(secured, client_address)
        finally:
            secured.close()

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that hangs up mid-answer (a killed sync, a timeout) is expected here


@contextmanager
def serve(
    handler: type[http.server.BaseHTTPRequestHandler],
    address: tuple[str, int] = ("127.0.0.1", 0),
    tls: ssl.SSLContext | None = None,
) -> Iterator[ThreadedServer]:
    """Serve `handler` from a background thread: on a free loopback port, or at `address`; over TLS when a
    server context is given."""
    server = ThreadedServer(address, handler)
    server.tls = tls
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
