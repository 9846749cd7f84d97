"""Requests bounded in time as a whole, and a pool that survives cancelled requests: a peer that trickles
bytes, an answer whose headers never end, and hundreds of requests cancelled mid-flight."""

from __future__ import annotations

import asyncio
import http.server
import random
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mirror.demo.localregistry import LocalRegistry
from mirror.demo.sample import push_single
from mirror.registry import RegistryClient, RegistryUnreachable
from mirror.registry.deadline import DeadlineExceeded
from mirror.registry.options import ClientOptions
from mirror.registry.retry import RetryPolicy
from tests.support import http_server, manifest_digest, run_async, run_bounded, sync_json, write_config

NO_RETRY = RetryPolicy(attempts=1)


class Trickle(http.server.BaseHTTPRequestHandler):
    """`/body`: a declared 1 MB answer sent a byte a second; `/headers`: headers sent a byte a second, never
    ending; `/fast`: 4 MB at once."""

    protocol_version = "HTTP/1.1"
    stop = threading.Event()

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        try:
            if self.path == "/body/index.yaml":
                self.path = "/body"
            if self.path == "/fast":
                body = b"x" * (4 * 1024 * 1024)
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            if self.path == "/headers":
                self.wfile.write(b"HTTP/1.1 200 OK\r\nX-Slow: ")
            else:
                self.send_response(200)
                self.send_header("Content-Length", str(1024 * 1024))
                self.end_headers()
            while not self.stop.wait(1.0):
                self.wfile.write(b"a")
                self.wfile.flush()
        except OSError:
            pass  # the client gave up, as it should


@pytest.fixture
def trickle() -> Iterator[str]:
    Trickle.stop.clear()
    with http_server(Trickle) as server:
        yield f"127.0.0.1:{server.server_address[1]}"
        Trickle.stop.set()


def _get(host: str, path: str, deadline: float) -> float:
    options = ClientOptions(plain_http=True, read_timeout=5, deadline=deadline, retry=NO_RETRY)

    async def read() -> float:
        client = RegistryClient.open(host, options)
        started = time.monotonic()
        try:
            response = await client.http.get(path, auth=None)
            await response.aread()
        finally:
            await client.aclose()
        return time.monotonic() - started

    return run_async(read)


def test_a_body_trickled_a_byte_per_second_is_cut_at_the_deadline(trickle: str) -> None:
    # each byte arrives well inside the 5 s read timeout: only the deadline ends it (3 s plus 1 MB at 64 KiB/s)
    started = time.monotonic()
    with pytest.raises(DeadlineExceeded):
        _get(trickle, "/body", deadline=3)
    assert time.monotonic() - started < 60


def test_headers_that_never_end_are_cut_at_the_deadline(trickle: str) -> None:
    started = time.monotonic()
    with pytest.raises(DeadlineExceeded):
        _get(trickle, "/headers", deadline=3)
    assert time.monotonic() - started < 60


def test_a_large_answer_at_a_good_rate_is_not_cut(trickle: str) -> None:
    # 4 MB with a deadline of 1 s: the body earns 4 MB / 64 KiB/s = 64 s on top
    assert _get(trickle, "/fast", deadline=1) < 60


def test_cancelled_requests_do_not_use_up_the_connection_pool(target: LocalRegistry) -> None:
    """httpcore loses a pool slot when a request is cancelled while its connection opens; mirror cancels
    requests routinely. After 600 cancelled at scattered moments on a 4-connection pool, the next request
    still gets a connection within its pool timeout (10 s)."""
    options = ClientOptions(plain_http=True, max_connections=4, read_timeout=10, connect_timeout=10)

    async def cancel_many_then_ask() -> None:
        client = RegistryClient.open(target.host, options)
        try:
            for _ in range(3):
                tasks = [asyncio.ensure_future(client.head_manifest(f"ns/img{i}", "v1")) for i in range(200)]
                for task in tasks:
                    await asyncio.sleep(random.uniform(0, 0.002))
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
            assert await client.head_manifest("ns/after", "v1") is None
        finally:
            await client.aclose()

    try:
        run_async(cancel_many_then_ask)
    except RegistryUnreachable as exc:
        pytest.fail(f"the pool was used up by cancelled requests: {exc}")


def test_hundreds_of_missing_images_do_not_stall_the_real_one(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, capsys: pytest.CaptureFixture[str]
) -> None:
    """300 configured images whose tags do not exist, each cancelling its target tag look-up when the source
    answers 404, and two connections per registry: the one real image is still copied and verified."""

    async def seed() -> None:
        client = RegistryClient.open(source.host, ClientOptions(plain_http=True))
        try:
            await push_single(client, "projecthami/hami", "v2.10.0")
        finally:
            await client.aclose()

    run_async(seed)
    images = [{"name": "hami", "source": "projecthami/hami", "tag": "{version}", "values_keys": ["devicePlugin.image"]}]
    images += [{"name": f"ghost{i}", "source": f"ghost/img{i}", "tag": "v1"} for i in range(300)]
    config = write_config(tmp_path / "mirror.yaml", source, [target], images=images)
    text = config.read_text()
    config.write_text(text.replace("plain_http: true", "plain_http: true\n    max_connections: 2"))
    config.write_text(config.read_text() + "transfer:\n  read_timeout: 20\n")
    code, report, _ = sync_json(config, capsys, "v2.10.0")
    assert code == 1  # the missing images fail
    hami = next(i for i in report["images"] if i["name"] == "hami")
    assert [t["action"] for t in hami["targets"]] == ["copied"], hami
    assert manifest_digest(target, "mirrored/hami", "v2.10.0") == hami["source_digest"]
    missing = [i for i in report["images"] if i["name"].startswith("ghost")]
    assert len(missing) == 300 and all("repository ghost/img" in i["error"] for i in missing)  # not at the source


def test_a_deadline_ends_a_request_that_a_slow_server_holds(tmp_path: Path) -> None:
    """A server that accepts and never answers: bounded by the deadline even with a long read timeout."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        host = f"127.0.0.1:{listener.getsockname()[1]}"
        options = ClientOptions(plain_http=True, read_timeout=600, deadline=2, retry=NO_RETRY)

        async def ask() -> None:
            client = RegistryClient.open(host, options)
            try:
                await client.head_manifest("ns/img", "v1")
            finally:
                await client.aclose()

        started = time.monotonic()
        with pytest.raises(RegistryUnreachable, match="deadline"):
            run_async(ask)
        assert time.monotonic() - started < 60


def test_a_chart_index_trickled_a_byte_per_second_ends_the_run_at_the_deadline(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry
) -> None:
    """Each byte well inside the 5 s read timeout, retries allowed: the 5 s deadline ends the whole read, and
    the run stops in one line before anything is copied or written."""
    Trickle.stop.clear()
    with http_server(Trickle) as server:
        repository = f"http://127.0.0.1:{server.server_address[1]}/body"
        config = write_config(tmp_path / "mirror.yaml", source, [target], chart={"repository": repository})
        config.write_text(config.read_text() + "transfer: {read_timeout: 5, deadline: 5}\n")
        marks = len(source.access_log()), len(target.access_log())
        started = time.monotonic()
        done = run_bounded("sync", "v2.10.0", "--config", str(config), cwd=tmp_path, seconds=120)
        Trickle.stop.set()
    assert time.monotonic() - started < 90
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    lines = done.error_lines()
    assert len(lines) == 1 and "deadline" in lines[0] and len(lines[0]) < 1000, lines
    assert (len(source.access_log()), len(target.access_log())) == marks
    assert not (tmp_path / "out").exists()
