"""Debian's tinyproxy, a real forward proxy, and microsocks, a real SOCKS5 proxy, for the tests of mirror's
HTTPS_PROXY support: each run in the foreground (inside another network namespace when given a command prefix such
as nsenter's), and what it logged, read back as the tunnels it was asked for."""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

CONNECT_LINE = re.compile(r"Request \(file descriptor \d+\): CONNECT (\S+) HTTP/1\.[01]")
SOCKS_LINE = re.compile(r"client\[\d+\] \S+: connected to (\S+)")  # microsocks: each tunnel it opened


@dataclass
class ForwardProxy:
    address: str
    port: int
    log: Path
    login: tuple[str, str] | None

    def url(self, login: tuple[str, str] | None = None) -> str:
        user, password = login or self.login or ("", "")
        return f"http://{user}:{password}@{self.address}:{self.port}" if user else f"http://{self.address}:{self.port}"

    def tunnels(self) -> list[str]:
        """`host:port` of every CONNECT it was asked for, in order (refused ones too)."""
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return CONNECT_LINE.findall(text)


def tinyproxy_config(directory: Path, address: str, port: int, login: tuple[str, str] | None) -> Path:
    lines = [
        f"Port {port}",
        f"Listen {address}",
        "Timeout 60",
        f'LogFile "{directory / "tinyproxy.log"}"',
        "LogLevel Connect",
        "MaxClients 200",
        f"Allow {address}",
        "ConnectPort 443",
        "DisableViaHeader Yes",
    ]
    if login is not None:
        lines.append(f"BasicAuth {login[0]} {login[1]}")
    path = directory / "tinyproxy.conf"
    path.write_text("\n".join(lines) + "\n")
    return path


@contextmanager
def forward_proxy(
    directory: Path,
    address: str = "127.0.0.1",
    port: int = 3128,
    login: tuple[str, str] | None = None,
    prefix: tuple[str, ...] = (),
) -> Iterator[ForwardProxy]:
    """tinyproxy at `address:port`, allowing CONNECT to port 443 only (its Debian default allows more), with a
    Basic login when given; `prefix` runs it elsewhere (`nsenter ... --`), where its port is waited for by a
    connection attempt made there too."""
    if shutil.which("tinyproxy") is None:
        pytest.fail("tinyproxy is not installed: scripts/bootstrap.sh --tests installs it")
    directory.mkdir(parents=True, exist_ok=True)
    config = tinyproxy_config(directory, address, port, login)
    output = (directory / "tinyproxy.out").open("wb")
    process = subprocess.Popen([*prefix, "tinyproxy", "-d", "-c", str(config)], stdout=output, stderr=output)
    output.close()
    with _stopped_after(process):
        _wait_listening(address, port, prefix, process, directory / "tinyproxy.out")
        yield ForwardProxy(address, port, directory / "tinyproxy.log", login)


@contextmanager
def _stopped_after(process: subprocess.Popen[bytes]) -> Iterator[None]:
    try:
        yield
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _wait_listening(
    address: str, port: int, prefix: tuple[str, ...], process: subprocess.Popen[bytes], output: Path
) -> None:
    """A connection attempt made where the proxy runs (through `prefix`), until one is taken."""
    probe = f"import socket; socket.create_connection(({address!r}, {port}), timeout=1).close()"
    deadline = time.monotonic() + 30
    while subprocess.run([*prefix, "python3", "-c", probe], capture_output=True, check=False).returncode != 0:
        assert process.poll() is None, output.read_text(errors="replace")
        assert time.monotonic() < deadline, f"{output.stem} did not start listening within 30 s"
        time.sleep(0.1)


@dataclass
class SocksProxy:
    address: str
    port: int
    log: Path
    login: tuple[str, str]

    def url(self, login: tuple[str, str] | None = None, scheme: str = "socks5") -> str:
        user, password = login or self.login
        return f"{scheme}://{user}:{password}@{self.address}:{self.port}"

    def tunnels(self) -> list[str]:
        """`host:port` of every tunnel it opened, in order (microsocks logs no refused one)."""
        return SOCKS_LINE.findall(self.log.read_text(errors="replace") if self.log.exists() else "")


@contextmanager
def socks_proxy(
    directory: Path, login: tuple[str, str], address: str = "127.0.0.1", port: int = 1080, prefix: tuple[str, ...] = ()
) -> Iterator[SocksProxy]:
    """microsocks at `address:port` with a username/password login (RFC 1929); `prefix` runs it elsewhere."""
    if shutil.which("microsocks") is None:
        pytest.fail("microsocks is not installed: scripts/bootstrap.sh --tests installs it")
    directory.mkdir(parents=True, exist_ok=True)
    log = directory / "microsocks.out"
    output = log.open("wb")
    command = ["microsocks", "-i", address, "-p", str(port), "-u", login[0], "-P", login[1]]
    process = subprocess.Popen([*prefix, *command], stdout=output, stderr=output)
    output.close()
    with _stopped_after(process):
        _wait_listening(address, port, prefix, process, log)
        yield SocksProxy(address, port, log, login)
