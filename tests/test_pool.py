"""The connection pool and its HTTP/1.1 connections (registry/pool.py, registry/http11.py), against Debian's
registry and small servers on loopback; one odd wire case (a write that fails after the server has answered)
over a scripted stream."""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import select
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from mirror.demo.certs import make_certificates
from mirror.demo.localregistry import LocalRegistry
from mirror.registry import RegistryClient
from mirror.registry.http11 import Http11Connection, Origin, Timeouts
from mirror.registry.options import ClientOptions
from mirror.registry.pool import ConnectionPool, PooledTransport, pooled_transport
from mirror.registry.retry import RetryPolicy
from mirror.registry.sockets import SocketBackend, SocketStream
from mirror.registry.tls import TrustError
from mirror.registry.transport import open_http_client
from tests.support import http_server, with_client

WAIT = 30.0  # seconds a test waits for something that happens at once, on a loaded machine


class CountingBackend(SocketBackend):
    def __init__(self) -> None:
        self.connects = 0

    async def connect_tcp(self, *args: Any, **kwargs: Any) -> SocketStream:
        self.connects += 1
        return await super().connect_tcp(*args, **kwargs)


def counted_transport(
    max_connections: int = 8, max_idle: int | None = None, keepalive_expiry: float = 600
) -> tuple[PooledTransport, CountingBackend]:
    backend = CountingBackend()
    pool = ConnectionPool(False, max_connections, max_idle or max_connections, keepalive_expiry, backend)
    return PooledTransport(pool), backend


def until(condition: Callable[[], bool]) -> None:
    """Wait (in a thread: the loop goes on) until `condition` holds, up to WAIT seconds."""
    deadline = time.monotonic() + WAIT
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)


class Quiet(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def reply(self, status: int, body: bytes, *headers: tuple[str, str]) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)
        self.wfile.flush()


def test_an_idle_connection_the_server_closed_is_noticed_before_it_is_reused() -> None:
    """Whether the server closed an idle connection is known from the socket stream's state: a connection
    closed while idle is dropped, not reused."""
    closed = threading.Event()
    peers: list[int] = []

    class Handler(Quiet):
        def do_GET(self) -> None:
            peers.append(self.client_address[1])
            self.reply(200, b"ok")
            if len(peers) == 1:  # keep-alive was offered; the server closes the connection anyway
                self.connection.shutdown(socket.SHUT_RDWR)
                self.close_connection = True
                closed.set()

    async def twice(url: str) -> None:
        transport, _ = counted_transport(max_connections=1)
        async with httpx.AsyncClient(transport=transport) as client:  # no retry layer: a reuse would fail
            assert (await client.get(url)).text == "ok"
            assert await asyncio.to_thread(closed.wait, WAIT)
            # until the end of file has reached the client's socket
            await asyncio.to_thread(
                until, lambda: not any(c.fit_for_reuse(time.monotonic()) for c in transport.pool.idle)
            )
            assert (await client.get(url)).text == "ok"

    with http_server(Handler) as server:
        asyncio.run(twice(f"http://127.0.0.1:{server.server_address[1]}/"))
    assert len(peers) == 2 and peers[0] != peers[1]  # the second request came on a new connection


def test_the_pool_bounds_its_connections_reuses_them_and_keeps_alive_no_more_than_it_may(
    source: LocalRegistry,
) -> None:
    """60 requests at once share at most 4 connections; once they are answered, the pool keeps at most
    `max_keepalive_connections` of them, and the next request reuses the one kept."""

    async def burst() -> tuple[list[int], list[int], int, int, int]:
        transport, backend = counted_transport(max_connections=4, max_idle=1)
        sizes: list[int] = []

        async def probe(client: httpx.AsyncClient) -> int:
            response = await client.get(f"{source.url}/v2/")
            sizes.append(transport.pool.open_connections)
            return response.status_code

        async with httpx.AsyncClient(transport=transport) as client:
            statuses = await asyncio.gather(*(probe(client) for _ in range(60)))
            kept = transport.pool.open_connections
            made = backend.connects
            await client.get(f"{source.url}/v2/")
            return statuses, sizes, made, kept, backend.connects

    mark = len(source.access_log())
    statuses, sizes, made, kept, after = asyncio.run(burst())
    assert statuses == [200] * 60
    assert max(sizes) <= 4 and 1 <= made <= 4
    assert kept == 1 and after == made  # the one kept served the next request
    assert [entry.path for entry in source.access_log()[mark:]] == ["/v2/"] * 61


def test_idle_connections_kept_for_waiting_requests_are_trimmed_once_none_waits(source: LocalRegistry) -> None:
    """Four answers read to their end, their connections handed back at once while a fifth request waits: the pool
    keeps them all idle for it (closing one to respect the keep-alive limit would only make it open another), and
    once it is answered, the pool is back within the limit of one idle connection."""

    async def handed_back_together() -> tuple[int, int, int]:
        transport, backend = counted_transport(max_connections=4, max_idle=1)
        async with httpx.AsyncClient(transport=transport) as client:
            url = f"{source.url}/v2/"
            answers = [await client.send(client.build_request("GET", url), stream=True) for _ in range(4)]
            for answer in answers:
                assert isinstance(answer.stream, httpx.AsyncByteStream)
                async for _ in answer.stream:  # read to the end, not closed
                    pass
            fifth = asyncio.ensure_future(client.get(url))
            await asyncio.to_thread(until, lambda: len(transport.pool._waiting) == 1)
            for answer in answers:  # no await here lets the fifth request run in between
                await answer.aclose()
            assert (await fifth).status_code == 200
            return transport.pool.open_connections, len(transport.pool.idle), backend.connects

    assert asyncio.run(handed_back_together()) == (1, 1, 4)


def test_a_burst_over_idle_connections_opens_no_more(source: LocalRegistry) -> None:
    """40 requests at once over 8 idle keep-alive connections: each idle connection is handed to one request
    at a time, so the burst is carried by the 8 (a connection handed twice would fail its second exchange)."""

    async def bursts() -> tuple[list[int], int, int]:
        transport, backend = counted_transport(max_connections=8)
        async with httpx.AsyncClient(transport=transport) as client:
            warm = await asyncio.gather(*(client.get(f"{source.url}/v2/") for _ in range(8)))
            opened = backend.connects
            answers = await asyncio.gather(*(client.get(f"{source.url}/v2/") for _ in range(40)))
            return [r.status_code for r in (*warm, *answers)], opened, backend.connects

    statuses, opened, connects = asyncio.run(bursts())
    assert statuses == [200] * 48
    assert connects == opened <= 8


def test_whether_the_server_closed_an_idle_connection_is_known_without_a_system_call(
    source: LocalRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    """httpx's own transport (httpcore's pool and backend, the control below) asks with a `poll` of the socket at
    least once a request; the pool here asks the socket stream, which answers from what the loop has read. That
    the answer is right is `test_an_idle_connection_the_server_closed_is_noticed_before_it_is_reused`."""
    polls: list[int] = []
    poll = select.poll

    def counted() -> select.poll:
        polls.append(1)
        return poll()

    monkeypatch.setattr(select, "poll", counted)

    async def sequential(transport: httpx.AsyncBaseTransport) -> list[int]:
        async with httpx.AsyncClient(transport=transport) as client:
            await asyncio.gather(*(client.get(f"{source.url}/v2/") for _ in range(8)))
            polls.clear()
            return [(await client.get(f"{source.url}/v2/")).status_code for _ in range(200)]

    limits = httpx.Limits(max_connections=8, max_keepalive_connections=8, keepalive_expiry=600)
    assert asyncio.run(sequential(pooled_transport(limits, verify=False, http2=False))) == [200] * 200
    assert polls == []
    assert asyncio.run(sequential(httpx.AsyncHTTPTransport(limits=limits))) == [200] * 200
    assert len(polls) >= 200


def test_http11_requests_load_neither_httpcore_nor_anyio(source: LocalRegistry) -> None:
    """httpcore's pool takes its locks and events from anyio, whose asyncio backend took about 20 ms to load
    before every run's first request, and importing httpcore (with h2) took about 30 ms of every start-up. The sync
    command and its requests over HTTP/1.1 load none of it; httpx's own transport, the control, loads both."""
    script = (
        "import asyncio, sys, httpx\n"
        "import mirror.commands.sync\n"
        "from mirror.registry.pool import pooled_transport\n"
        "async def main(own):\n"
        "    limits = httpx.Limits(max_connections=4)\n"
        "    transport = pooled_transport(limits, False, False) if own else httpx.AsyncHTTPTransport(limits=limits)\n"
        "    async with httpx.AsyncClient(transport=transport) as client:\n"
        f"        answers = await asyncio.gather(*(client.get('{source.url}/v2/') for _ in range(8)))\n"
        "    return [a.status_code for a in answers]\n"
        "print(asyncio.run(main(sys.argv[1] == 'own')), 'httpcore' in sys.modules, 'anyio' in sys.modules)\n"
    )

    def loaded(which: str) -> str:
        done = subprocess.run([sys.executable, "-c", script, which], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    assert loaded("own") == f"{[200] * 8} False False"
    assert loaded("httpx") == f"{[200] * 8} True True"


def test_pools_share_one_tls_context_per_trust_and_alpn(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Loading the CA bundle costs about 20 ms: every pool with the same trust and ALPN setting shares one."""
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    limits = httpx.Limits(max_connections=2)

    def context(verify: bool, http2: bool) -> ssl.SSLContext:
        transport = pooled_transport(limits, verify=verify, http2=http2)
        if isinstance(transport, PooledTransport):
            return transport.pool.ssl_context
        assert isinstance(transport, httpx.AsyncHTTPTransport)  # HTTP/2: httpx's own, over httpcore's pool
        built = transport._pool._ssl_context
        assert built is not None
        return built

    shared = context(True, False)
    assert context(True, False) is shared and shared.verify_mode is ssl.CERT_REQUIRED
    assert context(True, True) is not shared  # ALPN is set on the context: HTTP/2 pools have their own
    assert context(False, False).verify_mode is ssl.CERT_NONE
    ca, _, _ = make_certificates(tmp_path, {"registry.test": "127.0.0.1"})
    monkeypatch.setenv("SSL_CERT_FILE", str(ca))
    own = context(True, False)
    assert own is not shared
    assert [c["subject"] for c in own.get_ca_certs()] == [((("commonName", "mirror test CA"),),)]


def test_a_head_keeps_its_connection_and_a_body_left_unread_closes_it(source: LocalRegistry) -> None:
    """After a `HEAD` (no body to read) the connection is reused; a streamed `GET` closed before its body was read
    cannot carry another exchange, so its connection is closed and the next request opens one."""
    from mirror.demo.sample import push_single

    async def pushed(client: RegistryClient) -> str:
        await push_single(client, "ns/r", "one", layer_sizes=(4 * 1024 * 1024,))
        return (await client.get_manifest("ns/r", "one")).blobs[-1].digest

    blob = f"{source.url}/v2/ns/r/blobs/{with_client(source, pushed)}"

    async def exchanges() -> list[int]:
        transport, backend = counted_transport(max_connections=1)
        async with httpx.AsyncClient(transport=transport) as client:
            counts = []
            for _ in range(2):
                assert (await client.head(blob)).status_code == 200
                counts.append(backend.connects)
            async with client.stream("GET", blob) as response:
                assert response.status_code == 200
            counts.append(transport.pool.open_connections)
            assert (await client.head(blob)).status_code == 200
            counts.append(backend.connects)
            return counts

    assert asyncio.run(exchanges()) == [1, 1, 0, 2]


def test_a_connection_the_server_will_close_is_not_kept() -> None:
    """`Connection: close` from the server: each request has a connection of its own, none is kept idle."""

    class Handler(Quiet):
        def do_GET(self) -> None:
            self.reply(200, b"ok", ("Connection", "close"))

    async def three(url: str) -> tuple[list[str], int, int]:
        transport, backend = counted_transport()
        async with httpx.AsyncClient(transport=transport) as client:
            texts = [(await client.get(url)).text for _ in range(3)]
            return texts, backend.connects, transport.pool.open_connections

    with http_server(Handler) as server:
        assert asyncio.run(three(f"http://127.0.0.1:{server.server_address[1]}/")) == (["ok"] * 3, 3, 0)


def test_a_connection_that_brought_bytes_nobody_asked_for_is_not_reused() -> None:
    """A server that answers a `HEAD` with a body (as a proxy in front of a registry may) has sent bytes that
    would be read as the next answer: the connection is closed and the next request opens its own."""

    class Handler(Quiet):
        def do_HEAD(self) -> None:
            head = b"HTTP/1.1 429 Too Many Requests\r\nContent-Length: 15\r\nRetry-After: 0\r\n\r\n"
            self.wfile.write(head + b'{"errors": []}\n')  # one write: the body comes with the head

        def do_GET(self) -> None:
            self.reply(200, b"ok")

    async def head_then_get(url: str) -> tuple[int, str, int]:
        transport, backend = counted_transport()
        async with httpx.AsyncClient(transport=transport) as client:
            status = (await client.head(url)).status_code
            return status, (await client.get(url)).text, backend.connects

    with http_server(Handler) as server:
        assert asyncio.run(head_then_get(f"http://127.0.0.1:{server.server_address[1]}/")) == (429, "ok", 2)


def test_an_expired_idle_connection_is_not_reused(source: LocalRegistry) -> None:
    async def twice() -> int:
        transport, backend = counted_transport(keepalive_expiry=0)
        async with httpx.AsyncClient(transport=transport) as client:
            for _ in range(2):
                assert (await client.get(f"{source.url}/v2/")).status_code == 200
        return backend.connects

    assert asyncio.run(twice()) == 2


def test_a_request_waits_for_the_only_connection_and_a_waiter_that_gives_up_passes_its_turn(
    source: LocalRegistry,
) -> None:
    """One connection, held by a streamed response: a request that may wait 1 s for it fails with a pool timeout;
    of two waiting, the first is cancelled, and the second takes the connection once the response is closed."""

    async def queue() -> tuple[int, int]:
        transport, backend = counted_transport(max_connections=1)
        async with httpx.AsyncClient(transport=transport) as client:
            url = f"{source.url}/v2/"
            async with client.stream("GET", url) as held:
                assert held.status_code == 200
                with pytest.raises(httpx.PoolTimeout):
                    await client.get(url, timeout=httpx.Timeout(WAIT, pool=1.0))
                first = asyncio.ensure_future(client.get(url))
                second = asyncio.ensure_future(client.get(url))
                await asyncio.to_thread(until, lambda: len(transport.pool._waiting) == 2)
                first.cancel()
                await held.aread()  # the body read to its end: the connection goes back, to the next in line
            answer = await asyncio.wait_for(second, WAIT)
            assert first.cancelled()
            return answer.status_code, backend.connects

    assert asyncio.run(queue()) == (200, 1)


@pytest.mark.parametrize("cut", ["before the head", "in the body"])
def test_a_request_cancelled_mid_exchange_gives_its_place_back(cut: str) -> None:
    """A caller cancelled while it waits for the answer's head, or while it reads the body, leaves a connection
    that cannot carry another exchange: it is closed and its place in the pool freed (httpcore's pool lost such a
    place for good, encode/httpcore#1093), so the next request opens a connection and is answered."""
    hold = threading.Event()

    class Handler(Quiet):
        def do_GET(self) -> None:
            if self.path == "/held":
                if cut == "in the body":
                    self.send_response(200)
                    self.send_header("Content-Length", str(1 << 20))
                    self.end_headers()
                    self.wfile.write(b"x" * 1024)
                    self.wfile.flush()
                hold.wait(WAIT)
                self.close_connection = True
                return
            self.reply(200, b"ok")

    async def cancelled_then_asked(base: str) -> tuple[int, int, str, int]:
        transport, backend = counted_transport(max_connections=1)
        started = asyncio.Event()

        async def held(client: httpx.AsyncClient) -> None:
            async with client.stream("GET", f"{base}held") as response:
                async for _ in response.aiter_raw():
                    started.set()
            started.set()

        async with httpx.AsyncClient(transport=transport) as client:
            task = asyncio.ensure_future(held(client))
            if cut == "in the body":
                await asyncio.wait_for(started.wait(), WAIT)
            else:
                await asyncio.to_thread(until, lambda: backend.connects == 1)
                await asyncio.sleep(0.2)  # the request is on its way; how far it got does not change the outcome
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            left = transport.pool.open_connections
            idle = len(transport.pool.idle)
            text = (await client.get(f"{base}next")).text
            hold.set()
            return left, idle, text, backend.connects

    with http_server(Handler) as server:
        assert asyncio.run(cancelled_then_asked(f"http://127.0.0.1:{server.server_address[1]}/")) == (0, 0, "ok", 2)


def test_an_answer_sent_before_the_upload_was_read_is_the_answer() -> None:
    """A server may refuse an upload as soon as it has read the headers, then drain and close: the client reads
    the refusal, and does not keep the connection."""

    class Handler(Quiet):
        def do_PUT(self) -> None:
            self.reply(413, b"too big!", ("Connection", "close"))
            self.connection.shutdown(socket.SHUT_WR)
            while self.rfile.read1(1 << 16):  # drained, as a server does before it closes
                pass
            self.close_connection = True

    async def upload(url: str) -> tuple[int, str, int]:
        transport, _ = counted_transport()
        async with httpx.AsyncClient(transport=transport) as client:
            response = await client.put(url, content=b"x" * (16 * 1024 * 1024))
            return response.status_code, response.text, transport.pool.open_connections

    with http_server(Handler) as server:
        assert asyncio.run(upload(f"http://127.0.0.1:{server.server_address[1]}/")) == (413, "too big!", 0)


@contextmanager
def raw_server(reply: bytes) -> Iterator[str]:
    """A server that reads a request's head, sends `reply` as it is, and closes."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        connection, _ = listener.accept()
        with connection:
            received = b""
            while b"\r\n\r\n" not in received:
                received += connection.recv(65536)
            connection.sendall(reply)
            connection.shutdown(socket.SHUT_WR)
            while connection.recv(65536):
                pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/"
    finally:
        listener.close()
        thread.join(WAIT)


@pytest.mark.parametrize(
    ("reply", "said"),
    [
        (b"", "Server disconnected without sending a response."),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", "peer closed connection without sending complete"),
        (b"SMTP ready\r\n\r\n", "illegal status line"),
    ],
)
def test_a_broken_answer_is_a_protocol_error(reply: bytes, said: str) -> None:
    async def ask(url: str) -> None:
        transport, _ = counted_transport()
        async with httpx.AsyncClient(transport=transport) as client:
            await client.get(url)

    with raw_server(reply) as url, pytest.raises(httpx.RemoteProtocolError, match=said):
        asyncio.run(ask(url))


class ScriptedStream(SocketStream):
    """A socket stream whose writes fail once the first is through (the server has closed its side) and whose
    reads give what the server had already sent."""

    def __init__(self, answer: bytes) -> None:
        self._answer = answer
        self.writes = 0

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:  # noqa: ASYNC109
        answer, self._answer = self._answer[:max_bytes], self._answer[max_bytes:]
        return answer

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:  # noqa: ASYNC109
        self.writes += 1
        if self.writes > 1:
            raise httpx.WriteError("Broken pipe")

    is_readable = False

    def close(self) -> None:
        pass


def test_a_write_that_fails_after_the_server_answered_still_gives_the_answer() -> None:
    stream = ScriptedStream(b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 4\r\nConnection: close\r\n\r\nnope")
    connection = Http11Connection(Origin(b"http", b"registry.test", 80), stream, keepalive_expiry=None)
    request = httpx.Request("PUT", "http://registry.test/upload", content=b"x" * 1024)

    async def exchange() -> tuple[int, bytes, bool]:
        head = await connection.send(request, Timeouts(None, None, None, None))
        body = b"".join([piece async for piece in connection.body(Timeouts(None, None, None, None))])
        return head.status_code, body, connection.finish()

    assert asyncio.run(exchange()) == (401, b"nope", False)
    assert stream.writes == 2


async def test_a_plain_http_registrys_client_checks_an_https_origins_certificate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plain-HTTP registry's token realm or blob redirect may be https: its certificate is checked as any
    other's (such a registry's client once skipped the check, and would have sent its login to anyone)."""
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    ca, cert, key = make_certificates(tmp_path, {"localhost": "127.0.0.1"})
    serving = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    serving.load_cert_chain(cert, key)

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\ntoken")
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0, ssl=serving)
    realm = f"https://127.0.0.1:{server.sockets[0].getsockname()[1]}/token"
    options = ClientOptions(plain_http=True, retry=RetryPolicy(attempts=1), anonymous=True)
    async with server:
        async with open_http_client("registry.test:5000", options) as untrusting:
            with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
                await untrusting.get(realm)
        monkeypatch.setenv("SSL_CERT_FILE", str(ca))
        async with open_http_client("registry.test:5000", options) as trusting:
            assert (await trusting.get(realm)).text == "token"


async def test_a_ca_bundle_that_cannot_be_loaded_is_one_line_before_any_connection(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The pool takes its TLS context at its first TLS connection: a bundle the environment names wrongly is said
    then, naming the variable, with no socket opened for it."""
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "missing.pem"))
    backend = CountingBackend()
    pool = ConnectionPool(True, backend=backend)
    async with httpx.AsyncClient(transport=PooledTransport(pool)) as client:
        with pytest.raises(TrustError, match=r"the CA bundle \(SSL_CERT_FILE=\S+missing.pem\) cannot be loaded"):
            await client.get("https://registry.example/v2/")
    assert backend.connects == 0 and pool.open_connections == 0


async def test_a_url_that_is_not_http_is_not_sent() -> None:
    """A chart repository redirecting to ftp:// or file:// (httpx follows any scheme): nothing is sent."""
    backend = CountingBackend()
    async with httpx.AsyncClient(transport=PooledTransport(ConnectionPool(True, backend=backend))) as client:
        for url in ("ftp://127.0.0.1:9/chart.tgz", "file:///etc/passwd"):
            with pytest.raises(httpx.UnsupportedProtocol):
                await client.get(url)
    assert backend.connects == 0
