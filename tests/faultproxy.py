"""A fault-injecting HTTP proxy between mirror and a real registry.

Faults are matched in order against each request (method, path pattern), skip the first `skip` matches,
then apply to the next `count`: answer with a status (503, 429 with Retry-After), reset the connection
after N bytes of the request or response body, stall before answering, corrupt one byte of the response
body, or add response headers. Everything is counted: requests, and body bytes forwarded each way.
"""

from __future__ import annotations

import http.client
import http.server
import json
import re
import socket
import struct
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from tests.support import http_server

HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "te", "upgrade"}


@dataclass
class Fault:
    # status: answer with `status` instead of forwarding; reset_request: forward `after_bytes` of the body,
    # then reset both sides (the registry sees a partial write); drop_request: read `after_bytes` from the
    # client and reset it, the registry never hears of the request; reset_response: send `after_bytes` of
    # the answer's body, then reset; lose_answer: forward the request, then reset the client instead of
    # answering (the registry did what was asked, the client cannot know);
    # stall: wait `seconds` first (with `until`: until it holds, `seconds` at the
    # most, counted in `released`); corrupt: flip the byte at `after_bytes`; corrupt_request: flip the byte at
    # `after_bytes` of the request's body on its way to the registry; headers: add `headers` to the answer
    # and take out the headers named in `strip`.
    kind: str
    method: str | None = None
    path: str = ""  # a regular expression searched in the request path
    count: int = 1
    skip: int = 0
    status: int = 503
    code: str = "UNAVAILABLE"
    retry_after: str | None = None
    after_bytes: int = 0
    seconds: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)
    strip: tuple[str, ...] = ()  # with headers: header names (lower case) taken out of the answer
    until: Callable[[], bool] | None = None
    released: int = 0  # stalls that `until` ended before `seconds` passed
    seen: int = 0
    applied: int = 0

    def take(self, method: str, path: str) -> bool:
        if (self.method and method != self.method) or not re.search(self.path, path):
            return False
        self.seen += 1
        if self.seen <= self.skip or self.applied >= self.count:
            return False
        self.applied += 1
        return True


@dataclass(frozen=True)
class Logged:
    at: float
    method: str
    path: str
    status: int
    fault: str | None


@dataclass
class FaultProxy:
    upstream_port: int
    faults: list[Fault] = field(default_factory=list)
    log: list[Logged] = field(default_factory=list)
    request_bytes: Counter[str] = field(default_factory=Counter)  # body bytes sent upstream, per method
    received_bytes: Counter[str] = field(default_factory=Counter)  # body bytes the client sent, per method
    response_bytes: Counter[str] = field(default_factory=Counter)
    port: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def add(self, *faults: Fault) -> None:
        with self.lock:
            self.faults.extend(faults)

    def fault_for(self, method: str, path: str) -> Fault | None:
        with self.lock:
            for fault in self.faults:
                if fault.take(method, path):
                    return fault
        return None

    def record(self, method: str, path: str, status: int, fault: Fault | None) -> None:
        with self.lock:
            self.log.append(Logged(time.monotonic(), method, path, status, fault.kind if fault else None))


def _stall(fault: Fault) -> None:
    if fault.until is None:
        time.sleep(fault.seconds)
        return
    deadline = time.monotonic() + fault.seconds
    while time.monotonic() < deadline:
        if fault.until():
            fault.released += 1
            return
        time.sleep(0.05)


def _reset(sock: socket.socket) -> None:
    """Close with RST, as a dropped connection looks to the peer."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


@contextmanager
def fault_proxy(upstream_port: int) -> Iterator[FaultProxy]:
    proxy = FaultProxy(upstream_port)

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _any(self) -> None:
            method, path = self.command, self.path
            fault = proxy.fault_for(method, path)
            length = int(self.headers.get("Content-Length", "0"))
            if fault and fault.kind == "stall":
                _stall(fault)
            if fault and fault.kind == "drop_request":
                proxy.received_bytes[method] += self._drain(min(length, fault.after_bytes))
                proxy.record(method, path, 0, fault)
                self.close_connection = True
                _reset(self.connection)
                return
            if fault and fault.kind == "status":
                proxy.received_bytes[method] += self._drain(length)
                proxy.record(method, path, fault.status, fault)
                body = json.dumps({"errors": [{"code": fault.code, "message": "injected fault"}]}).encode()
                self.send_response(fault.status)
                if fault.retry_after is not None:
                    self.send_header("Retry-After", fault.retry_after)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if method != "HEAD":  # as HTTP servers do: a HEAD answer's body is never sent
                    self.wfile.write(body)
                return
            upstream = http.client.HTTPConnection("127.0.0.1", proxy.upstream_port, timeout=60)
            try:
                upstream.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
                for key, value in self.headers.items():
                    if key.lower() not in HOP_BY_HOP:
                        upstream.putheader(key, value)
                upstream.endheaders()
                sent = 0
                while sent < length:
                    block = self.rfile.read(min(65536, length - sent))
                    proxy.received_bytes[method] += len(block)
                    if not block:
                        return self._abandon(upstream, method, path, fault)
                    if fault and fault.kind == "reset_request" and sent + len(block) > fault.after_bytes:
                        block = block[: fault.after_bytes - sent]
                        upstream.send(block)
                        proxy.request_bytes[method] += len(block)
                        return self._abandon(upstream, method, path, fault)
                    if fault and fault.kind == "corrupt_request" and sent <= fault.after_bytes < sent + len(block):
                        at = fault.after_bytes - sent
                        block = block[:at] + bytes([block[at] ^ 0xFF]) + block[at + 1 :]
                    upstream.send(block)
                    sent += len(block)
                    proxy.request_bytes[method] += len(block)
                response = upstream.getresponse()
                body = response.read()
            except OSError:
                return self._abandon(upstream, method, path, fault)
            finally:
                upstream.close()
            proxy.record(method, path, response.status, fault)
            if fault and fault.kind == "lose_answer":  # the registry did it; its answer never arrives
                self.close_connection = True
                _reset(self.connection)
                return
            if fault and fault.kind == "corrupt" and body:
                at = min(fault.after_bytes, len(body) - 1)
                body = body[:at] + bytes([body[at] ^ 0xFF]) + body[at + 1 :]
            try:
                self._answer(method, response, body, fault)
            except OSError:  # the client gave up (a timeout): nothing to answer
                self.close_connection = True

        def _answer(self, method: str, response: http.client.HTTPResponse, body: bytes, fault: Fault | None) -> None:
            self.send_response_only(response.status, response.reason)
            stripped = set(fault.strip) if fault and fault.kind == "headers" else set()
            for key, value in response.getheaders():
                if key.lower() not in HOP_BY_HOP | stripped and key.lower() != "content-length":
                    self.send_header(key, value)
            for key, value in (fault.headers if fault and fault.kind == "headers" else {}).items():
                self.send_header(key, value)
            declared = response.getheader("Content-Length")
            self.send_header("Content-Length", declared if method == "HEAD" and declared else str(len(body)))
            self.end_headers()
            if fault and fault.kind == "reset_response":
                self.wfile.write(body[: fault.after_bytes])
                self.wfile.flush()
                proxy.response_bytes[method] += min(len(body), fault.after_bytes)
                self.close_connection = True
                _reset(self.connection)
                return
            self.wfile.write(body)
            proxy.response_bytes[method] += len(body)

        def _drain(self, length: int) -> int:
            read = 0
            while read < length:
                block = self.rfile.read(min(65536, length - read))
                if not block:
                    break
                read += len(block)
            return read

        def _abandon(self, upstream: http.client.HTTPConnection, method: str, path: str, fault: Fault | None) -> None:
            upstream.close()
            proxy.record(method, path, 0, fault)
            self.close_connection = True
            _reset(self.connection)

        do_GET = do_HEAD = do_PUT = do_POST = do_PATCH = do_DELETE = _any

    with http_server(Handler) as server:
        proxy.port = server.server_address[1]
        yield proxy
