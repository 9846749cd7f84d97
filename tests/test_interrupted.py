"""A copy killed half-way (SIGKILL, no chance to clean up) leaves no tag at the target, and the next run
finishes the job reusing the blobs that already arrived.

The half-way point is made, not timed: the source's blobs come from a CDN that serves the first few blobs
asked for and holds every other answer until the test lets it go, so at the kill exactly those blobs are at
the target and no other upload can complete."""

from __future__ import annotations

import http.server
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mirror.demo.localregistry import LocalRegistry, start_registry
from tests.support import blob_exists, http_server, manifest_digest, requests_since, write_config
from tests.test_crash import wait_for
from tests.test_sync import VERSION, seed_release

HOLD_SECONDS = 300.0  # a held answer goes on after this long even if never let go (a failed test's leftovers)


@dataclass
class HeldCdn:
    """Serves a registry's blob storage (as `redirect_to`): the first `serve_first` distinct blobs asked for
    at once, every other blob's GET held (its headers sent, no body) until `let_go()`."""

    root: Path
    serve_first: int
    url: str = ""
    served: set[str] = field(default_factory=set)  # the digests served at once
    held: int = 0  # GETs waiting now
    gate: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def let_go(self) -> None:
        self.gate.set()

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
            path = (cdn.root / self.path.split("?", 1)[0].lstrip("/")).resolve()
            if not path.is_relative_to(cdn.root.resolve()) or not path.is_file():
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            data = path.read_bytes()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Content-Type", "application/octet-stream")
            self.end_headers()
            if not body:
                return
            if not cdn.admit(blob_digest(self.path)):
                try:
                    cdn.gate.wait(HOLD_SECONDS)
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


def test_sigkill_mid_copy_leaves_no_tag_and_the_rerun_completes(tmp_path: Path) -> None:
    with held_source(tmp_path / "source", serve_first=2) as (source, cdn):
        target = start_registry(tmp_path / "target")
        try:
            hami, certgen = seed_release(source)
            distinct = set(hami.blobs) | set(certgen.blobs)
            assert len(distinct) > 3
            config = write_config(tmp_path / "mirror.yaml", source, [target])
            command = [sys.executable, "-m", "mirror", "sync", VERSION, "--config", str(config)]
            process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=os.environ)
            # two blobs copied, the others waiting at the source: the copy is half-way, and stays there
            wait_for(lambda: len(_completed_uploads(target)) == 2 and cdn.held > 0, seconds=60)
            assert process.poll() is None, "the copy finished before it could be interrupted"
            process.send_signal(signal.SIGKILL)
            process.wait(timeout=30)

            repositories = ("mirrored/hami", "mirrored/kube-webhook-certgen")
            arrived = {d for d in distinct if any(blob_exists(target, r, d) for r in repositories)}
            assert arrived == cdn.served and len(arrived) == 2  # exactly the blobs served, no held one
            assert manifest_digest(target, "mirrored/hami", VERSION) is None
            assert manifest_digest(target, "mirrored/kube-webhook-certgen", "v1.1.1") is None
            assert manifest_digest(target, "mirrored/hami", hami.digest) is None  # the index is pushed last too
            mark = len(target.access_log())

            cdn.let_go()
            assert subprocess.call(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120) == 0

            assert manifest_digest(target, "mirrored/hami", VERSION) == hami.digest
            assert manifest_digest(target, "mirrored/kube-webhook-certgen", "v1.1.1") == certgen.digest
            rerun_uploads = [e for e in requests_since(target, mark) if e.method == "PUT" and "/blobs/" in e.path]
            assert len(rerun_uploads) == len(distinct) - len(arrived)
        finally:
            target.stop()


def _completed_uploads(target: LocalRegistry) -> list[str]:
    return [
        e.path for e in target.access_log() if e.method == "PUT" and "/blobs/uploads/" in e.path and e.status == 201
    ]
