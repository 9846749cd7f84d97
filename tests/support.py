"""Test helpers: registries, a CDN stand-in, config files and synchronous registry probes."""

from __future__ import annotations

import asyncio
import http.server
import json
import ssl
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

import httpx
import pytest
import yaml

from mirror.cli import main
from mirror.demo.localregistry import AccessEntry, LocalRegistry, start_registry
from mirror.demo.serving import serve
from mirror.oci import MANIFEST_ACCEPT
from mirror.registry import RegistryClient
from mirror.registry.options import ClientOptions

T = TypeVar("T")


def run_async(make: Callable[[], Awaitable[T]]) -> T:
    async def runner() -> T:
        return await make()

    return asyncio.run(runner())


def with_client(registry: LocalRegistry, action: Callable[[RegistryClient], Awaitable[T]]) -> T:
    async def go() -> T:
        client = RegistryClient.open(registry.host, ClientOptions(plain_http=not registry.tls))
        try:
            return await action(client)
        finally:
            await client.aclose()

    return asyncio.run(go())


def manifest_digest(registry: LocalRegistry, repository: str, ref: str) -> str | None:
    response = httpx.head(f"{registry.url}/v2/{repository}/manifests/{ref}", headers={"Accept": MANIFEST_ACCEPT})
    return response.headers["Docker-Content-Digest"] if response.status_code == 200 else None


def manifest_bytes(registry: LocalRegistry, repository: str, ref: str) -> bytes:
    response = httpx.get(f"{registry.url}/v2/{repository}/manifests/{ref}", headers={"Accept": MANIFEST_ACCEPT})
    response.raise_for_status()
    return response.content


def blob_bytes(registry: LocalRegistry, repository: str, digest: str) -> bytes:
    response = httpx.get(f"{registry.url}/v2/{repository}/blobs/{digest}", follow_redirects=True)
    response.raise_for_status()
    return response.content


def blob_exists(registry: LocalRegistry, repository: str, digest: str) -> bool:
    return httpx.head(f"{registry.url}/v2/{repository}/blobs/{digest}").status_code in (200, 307)


def sync_json(config: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, Any, str]:
    """`mirror sync ARGS --config CONFIG --json`: the exit code, the parsed report ({} when none) and stderr."""
    code = main(["sync", *args, "--config", str(config), "--json"])
    captured = capsys.readouterr()
    return code, json.loads(captured.out) if captured.out.strip() else {}, captured.err


def requests_since(registry: LocalRegistry, mark: int) -> list[AccessEntry]:
    return registry.access_log()[mark:]


class Request(Protocol):
    @property
    def method(self) -> str: ...

    @property
    def path(self) -> str: ...


R = TypeVar("R", bound=Request)


def beyond_heads(entries: Sequence[R]) -> list[R]:
    """What a fast path sent besides HEADs and the referrers listing (which this registry answers 404):
    anything here is a counted pull on Docker Hub, or a read that should not happen."""
    return [e for e in entries if e.method != "HEAD" and not (e.method == "GET" and "/referrers/" in e.path)]


def writes(entries: Sequence[R]) -> list[R]:
    """What changed something at a registry: pushes, upload sessions, deletes."""
    return [e for e in entries if e.method in ("PUT", "POST", "PATCH", "DELETE")]


class HasHost(Protocol):
    @property
    def host(self) -> str: ...


def write_config(
    path: Path,
    source: HasHost,
    targets: Sequence[HasHost],
    images: list[dict[str, Any]] | None = None,
    target_options: dict[str, Any] | None = None,
    **extra: Any,
) -> Path:
    config: dict[str, Any] = {
        "source": {"registry": source.host},
        "targets": [
            {"name": f"t{i}", "registry": t.host, "namespace": "mirrored", **(target_options or {})}
            for i, t in enumerate(targets)
        ],
        "images": images
        or [
            {
                "name": "hami",
                "source": "projecthami/hami",
                "tag": "{version}",
                "values_keys": ["scheduler.extender.image", "devicePlugin.image", "devicePlugin.monitor.image"],
            },
            {
                "name": "kube-webhook-certgen",
                "source": "liangjw/kube-webhook-certgen",
                "tag": "v1.1.1",
                "values_keys": ["scheduler.patch.imageNew"],
            },
        ],
        "output_dir": str(path.parent / "out"),
        "state_dir": str(path.parent / "state"),
        "spool": {"dir": str(path.parent / "spool")},  # the test's own, not the machine's temporary directory
        "registries": {r.host: {"plain_http": True} for r in [source, *targets]},
        "retry": {"base_delay": 0.05, "max_delay": 0.5, "max_elapsed": 30},
        # images that are not HAMi's leave HAMi's keys on Docker Hub: say so in the file, do not refuse it
        **({"values": {"unmirrored": "warn"}} if images else {}),
        **extra,
    }
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def answer_with_stored_file(handler: http.server.BaseHTTPRequestHandler, root: Path) -> bytes | None:
    """Answer with the headers of the file under `root` the request's path names (a registry's blob storage,
    as a CDN serves it), and return its bytes for the body; or answer 404 and return None."""
    path = (root / handler.path.split("?", 1)[0].lstrip("/")).resolve()
    if not path.is_relative_to(root.resolve()) or not path.is_file():
        handler.send_response(404)
        handler.send_header("Content-Length", "0")
        handler.end_headers()
        return None
    data = path.read_bytes()
    handler.send_response(200)
    handler.send_header("Content-Length", str(len(data)))
    handler.send_header("Content-Type", "application/octet-stream")
    handler.end_headers()
    return data


@dataclass
class CdnServer:
    """Serves a registry's storage directory the way Docker Hub's CDN serves redirected blob GETs, and
    remembers which requests carried an Authorization header. `delay` slows each response down."""

    root: Path
    delay: float = 0.0
    seen_authorization: list[str] = field(default_factory=list)
    requests: int = 0
    server: http.server.ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}"


@contextmanager
def cdn_server(
    root: Path, delay: float = 0.0, address: tuple[str, int] = ("127.0.0.1", 0), tls: ssl.SSLContext | None = None
) -> Iterator[CdnServer]:
    cdn = CdnServer(root, delay)

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _serve(self, body: bool) -> None:
            cdn.requests += 1
            if "Authorization" in self.headers:
                cdn.seen_authorization.append(self.path)
            data = answer_with_stored_file(self, cdn.root)
            if data is None or not body:
                return
            step = max(1, len(data) // 10)
            for start in range(0, len(data), step):
                if cdn.delay:
                    time.sleep(cdn.delay / 10)
                self.wfile.write(data[start : start + step])

        def do_GET(self) -> None:
            self._serve(True)

        def do_HEAD(self) -> None:
            self._serve(False)

    with http_server(Handler, address, tls) as server:
        cdn.server = server
        yield cdn


http_server = serve  # a handler served on a background thread, over TLS when given a context (mirror/demo/serving.py)


MEMORY_LIMIT = 2048 * 1024 * 1024  # address space for a bounded run (Helm's render child lowers its own)


@dataclass(frozen=True)
class BoundedRun:
    returncode: int
    stdout: str
    stderr: str

    def error_lines(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.strip()]


def run_bounded(
    *args: str, cwd: Path, env: dict[str, str] | None = None, seconds: float = 120.0, memory: int = MEMORY_LIMIT
) -> BoundedRun:
    """`python -m mirror <args>` under an address-space limit (`prlimit --as`) and a wall-clock bound: what a
    hostile input may cost. A run over either bound fails the test (TimeoutExpired, or the exit a MemoryError
    gives)."""
    import os
    import subprocess
    import sys

    command = ["prlimit", f"--as={memory}", "--", sys.executable, "-m", "mirror", *args]
    done = subprocess.run(
        command, cwd=cwd, env={**os.environ, **(env or {})}, capture_output=True, text=True, timeout=seconds
    )
    return BoundedRun(done.returncode, done.stdout, done.stderr)


HOLD_SECONDS = 300.0  # a held answer goes on after this long even if never let go (a failed test's leftovers)


@dataclass
class HeldCdn:
    """Serves a registry's blob storage (as `redirect_to`): the first `serve_first` distinct blobs asked for
    at once, every other blob's GET held (its headers sent, no body) until `let_go()`, or `let_one_go()` for
    one of them."""

    root: Path
    serve_first: int
    url: str = ""
    served: set[str] = field(default_factory=set)  # the digests served at once
    held: int = 0  # GETs waiting now
    gate: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    passes: threading.Semaphore = field(default_factory=lambda: threading.Semaphore(0))

    def let_go(self) -> None:
        self.gate.set()

    def let_one_go(self) -> None:
        self.passes.release()

    def hold(self) -> None:
        """Wait for `let_go()`, or a pass from `let_one_go()`."""
        deadline = time.monotonic() + HOLD_SECONDS
        while not self.gate.is_set() and time.monotonic() < deadline:
            if self.passes.acquire(timeout=0.05):
                return

    def admit(self, digest: str) -> bool:
        """Whether this blob is served at once; else the caller holds it."""
        with self.lock:
            if self.gate.is_set() or digest in self.served or len(self.served) < self.serve_first:
                self.served.add(digest)
                return True
            self.held += 1
            return False

    def release_one(self) -> None:
        with self.lock:
            self.held -= 1


def blob_digest(storage_path: str) -> str:
    """The digest of a distribution storage path (`.../blobs/sha256/ab/<hex>/data`)."""
    parts = storage_path.split("?", 1)[0].rstrip("/").split("/")
    return f"sha256:{parts[-2]}" if len(parts) >= 2 else storage_path


@contextmanager
def held_cdn(root: Path, serve_first: int) -> Iterator[HeldCdn]:
    cdn = HeldCdn(root, serve_first)

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_HEAD(self) -> None:
            self._answer(body=False)

        def do_GET(self) -> None:
            self._answer(body=True)

        def _answer(self, body: bool) -> None:
            data = answer_with_stored_file(self, cdn.root)
            if data is None or not body:
                return
            if not cdn.admit(blob_digest(self.path)):
                try:
                    cdn.hold()
                finally:
                    cdn.release_one()
            try:
                self.wfile.write(data)
            except OSError:  # the reader was killed while it waited
                self.close_connection = True

    with http_server(Handler) as server:
        cdn.url = f"http://127.0.0.1:{server.server_address[1]}"
        try:
            yield cdn
        finally:
            cdn.let_go()


@contextmanager
def held_source(workdir: Path, serve_first: int) -> Iterator[tuple[LocalRegistry, HeldCdn]]:
    """A real registry whose blob bytes come from a `HeldCdn`."""
    with held_cdn(workdir / "data", serve_first) as cdn:
        source = start_registry(workdir, redirect_to=cdn.url)
        try:
            yield source, cdn
        finally:
            source.stop()
