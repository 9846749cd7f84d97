"""`service.internal_port`: /metrics and the probes on a port of their own, off the public port an Ingress sends
webhooks and people to; each port answers 404 for the other's paths. Real `mirror serve` processes."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import httpx

from mirror.demo.localregistry import LocalRegistry
from mirror.demo.ports import free_port
from tests.test_service import AUTH, Service, service_config


class WithInternalPort(Service):
    """A service whose probes and metrics are on `internal`."""

    def __init__(self, config: Path, port: int, internal: int) -> None:
        super().__init__(config, port)
        self.internal = internal

    @property
    def readiness_url(self) -> str:
        return f"http://127.0.0.1:{self.internal}"


def test_metrics_and_probes_answer_on_the_internal_port_only(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry
) -> None:
    internal = free_port()
    config = service_config(tmp_path, source, target, service={"internal_port": internal})
    running = WithInternalPort(config, free_port(), internal)
    running.start()
    try:
        public, inside = running.url, running.readiness_url
        for path in ("/metrics", "/healthz", "/readyz"):
            assert httpx.get(f"{inside}{path}", timeout=10).status_code == 200, path
            away = httpx.get(f"{public}{path}", timeout=10)
            assert away.status_code == 404 and "mirror_" not in away.text, path
        assert "mirror_syncs_total" in httpx.get(f"{inside}/metrics", timeout=10).text
        assert httpx.get(f"{public}/jobs", headers=AUTH, timeout=10).status_code == 200
        for path in ("/jobs", "/"):
            assert httpx.get(f"{inside}{path}", headers=AUTH, timeout=10).status_code == 404, path
        assert httpx.post(f"{inside}/hooks/ci", content=b"{}", timeout=10).status_code == 404
    finally:
        assert running.stopped_cleanly()


def test_without_an_internal_port_everything_is_on_the_one_port(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry
) -> None:
    running = Service(service_config(tmp_path, source, target), free_port())
    running.start()
    try:
        for path in ("/metrics", "/healthz", "/readyz"):
            assert httpx.get(f"{running.url}{path}", timeout=10).status_code == 200, path
    finally:
        assert running.stopped_cleanly()


def serve_refused(config: Path, port: int) -> str:
    """`mirror serve` on `port`, expected to exit 2 before it listens: its log."""
    command = [sys.executable, "-m", "mirror", "serve", "--config", str(config), "--host", "127.0.0.1"]
    done = subprocess.run([*command, "--port", str(port)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    return done.stderr


def test_an_internal_port_taken_or_the_public_one_is_refused_before_anything_listens(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry
) -> None:
    public = free_port()
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        config = service_config(tmp_path, source, target, service={"internal_port": port})
        assert f"cannot listen on 127.0.0.1:{port}" in serve_refused(config, public)
    config = service_config(tmp_path, source, target, service={"internal_port": public})
    assert f"service.internal_port {public} is --port too" in serve_refused(config, public)
