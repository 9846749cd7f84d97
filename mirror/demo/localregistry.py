"""Run Debian's `docker-registry` (CNCF distribution) on a free loopback port, with its own storage."""

from __future__ import annotations

import re
import secrets
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import httpx
import yaml

from mirror.demo.ports import free_port
from mirror.demo.procstat import cpu_seconds
from mirror.settings import MirrorSettings

_ACCESS = re.compile(r'"(?P<method>[A-Z]+) (?P<path>\S+) HTTP/[\d.]+" (?P<status>\d{3}) (?P<size>\d+)?')


class RegistryBinaryMissing(RuntimeError):
    pass


@dataclass(frozen=True, slots=True)
class AccessEntry:
    method: str
    path: str
    status: int
    size: int = 0  # response body bytes


def read_access_log(path: Path) -> list[AccessEntry]:
    """The requests a `docker-registry` logged, in order."""
    text = path.read_text(encoding="utf-8", errors="replace")
    return [
        AccessEntry(m["method"], unquote(m["path"]), int(m["status"]), int(m["size"] or 0))
        for line in text.splitlines()
        if " - - [" in line and (m := _ACCESS.search(line))
    ]


PORT_TRIES = 5
IDENTITY_HEADER = "X-Local-Registry"


class PortTaken(RuntimeError):
    pass


def registry_binary() -> str:
    found = shutil.which("docker-registry") or (
        "/usr/bin/docker-registry" if Path("/usr/bin/docker-registry").exists() else None
    )
    if not found:
        raise RegistryBinaryMissing("docker-registry not found: apt-get install -y docker-registry")
    return found


@dataclass
class LocalRegistry:
    """A running registry. `host` is `address:port`, spoken to over plain HTTP unless it serves TLS."""

    workdir: Path
    port: int
    process: subprocess.Popen[bytes]
    address: str = "127.0.0.1"
    tls: bool = False
    identity: str = ""  # the value of its IDENTITY_HEADER: tells it from another server on the same port

    @property
    def host(self) -> str:
        return f"{self.address}:{self.port}"

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.host}"

    @property
    def storage(self) -> Path:
        return self.workdir / "data"

    @property
    def log_path(self) -> Path:
        return self.workdir / "registry.log"

    def access_log(self) -> list[AccessEntry]:
        return read_access_log(self.log_path)

    def cpu_seconds(self) -> float:
        """The CPU the registry has taken since it started: the server's side of the requests it answered."""
        return cpu_seconds(self.process.pid)

    def blob_path(self, digest: str) -> Path:
        hexpart = digest.removeprefix("sha256:")
        return self.storage / "docker/registry/v2/blobs/sha256" / hexpart[:2] / hexpart / "data"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start_registry(
    workdir: Path,
    *,
    image_manifests_only: bool = False,
    redirect_to: str | None = None,
    htpasswd: Path | None = None,
    auth: dict[str, Any] | None = None,
    port: int | None = None,
    address: str = "127.0.0.1",
    tls: tuple[Path, Path] | None = None,
) -> LocalRegistry:
    """Start a registry. `image_manifests_only` refuses manifests whose config is not an image config, as
    ACR's personal edition does; `redirect_to` answers blob GET/HEAD with a 307 to that base URL, as Docker
    Hub's CDN does; `htpasswd` turns on Basic auth; `auth` is a raw distribution auth section; `tls` is a
    (certificate, key) pair to serve HTTPS with."""
    workdir.mkdir(parents=True, exist_ok=True)
    chosen = port
    for _ in range(PORT_TRIES):
        try:
            return _start(
                workdir, chosen or free_port(), image_manifests_only, redirect_to, htpasswd, auth, address, tls
            )
        except PortTaken:
            if chosen:
                raise
    raise RuntimeError(f"docker-registry found no free port in {PORT_TRIES} tries")


def _start(
    workdir: Path,
    port: int,
    image_manifests_only: bool,
    redirect_to: str | None,
    htpasswd: Path | None,
    auth: dict[str, Any] | None,
    address: str,
    tls: tuple[Path, Path] | None,
) -> LocalRegistry:
    identity = secrets.token_hex(8)
    config: dict[str, Any] = {
        "version": 0.1,
        "log": {"level": "error", "accesslog": {"disabled": False}},
        "storage": {"filesystem": {"rootdirectory": str(workdir / "data")}, "delete": {"enabled": True}},
        "http": {"addr": f"{address}:{port}", "headers": {IDENTITY_HEADER: [identity]}},
    }
    if tls:
        config["http"]["tls"] = {"certificate": str(tls[0]), "key": str(tls[1])}
    if image_manifests_only:
        config["policy"] = {"repository": {"classes": ["image"]}}
    if redirect_to:
        config["middleware"] = {"storage": [{"name": "redirect", "options": {"baseurl": redirect_to}}]}
    if htpasswd:
        config["auth"] = {"htpasswd": {"realm": "mirror-test", "path": str(htpasswd)}}
    if auth:
        config["auth"] = auth
    config_path = workdir / "config.yml"
    config_path.write_text(yaml.safe_dump(config), encoding="utf-8")
    log = (workdir / "registry.log").open("ab")
    process = subprocess.Popen([registry_binary(), "serve", str(config_path)], stdout=log, stderr=subprocess.STDOUT)
    log.close()
    registry = LocalRegistry(workdir, port, process, address, tls is not None, identity)
    _wait_ready(registry)
    return registry


def _wait_ready(registry: LocalRegistry, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if registry.process.poll() is not None:
            log = registry.log_path.read_text(errors="replace")[-2000:]
            if "address already in use" in log:  # another process took the port between our pick and its bind
                raise PortTaken(log)
            raise RuntimeError(f"docker-registry exited: {log}")
        try:
            answer = httpx.get(f"{registry.url}/v2/", timeout=1.0, verify=False)  # noqa: S501 - only: is it up?
            if answer.headers.get(IDENTITY_HEADER) == registry.identity:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.05)  # not up yet, or another server holds the port until ours exits failing to bind it
    registry.stop()
    raise RuntimeError(f"docker-registry on {registry.host} did not start within {timeout} s")


def client_settings(*hosts: str) -> MirrorSettings:
    """Just enough settings for a RegistryClient to talk plain HTTP to these local registries."""
    return MirrorSettings(
        targets=[{"name": "local", "registry": hosts[0], "namespace": "local"}],  # type: ignore[list-item]
        images=[{"name": "unused", "source": "unused/unused"}],  # type: ignore[list-item]
        registries={host: {"plain_http": True} for host in hosts},  # type: ignore[misc]
    )
