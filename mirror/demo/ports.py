"""Loopback ports for local servers that bind a port we choose for them (registries, PostgreSQL, `mirror serve`).

Choosing a port and the server binding it are two steps, and anything that binds in between takes it. So ports
come from below the kernel's ephemeral range, where no socket bound to port 0 and no outgoing connection is ever
placed; one after another, so a port a stopped server let go is not handed to the next server soon after (a test
that stops its target must not find someone else's registry there); and processes that run side by side (test
workers) take disjoint shares of the range."""

from __future__ import annotations

import random
import socket
import threading
from pathlib import Path

EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
SPAN = 12000  # ports below the ephemeral range to choose from
LOWEST = 1024


def chosen_range(ephemeral: tuple[int, int] | None = None) -> range:
    """The ports to choose from: up to SPAN below the ephemeral range, or above it if it starts too low."""
    low, high = ephemeral or _ephemeral_range()
    if low - LOWEST >= SPAN // 4:
        return range(max(LOWEST, low - SPAN), low)
    return range(high + 1, 65536)


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = EPHEMERAL_RANGE.read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


class PortPool:
    """Hands out free ports from share `share` of `shares` equal parts of `ports`, in turn from a random start."""

    def __init__(self, ports: range, share: int = 0, shares: int = 1) -> None:
        if not 0 <= share < shares:
            raise ValueError(f"share {share} is not one of {shares}")
        size = len(ports) // shares
        self._ports = ports[share * size : (share + 1) * size]
        if not self._ports:
            raise ValueError(f"{len(ports)} ports cannot be split into {shares} shares")
        self._next = random.randrange(len(self._ports))  # spreads runs over the share; not a secret
        self._lock = threading.Lock()

    def take(self) -> int:
        with self._lock:
            for _ in range(len(self._ports)):
                port = self._ports[self._next]
                self._next = (self._next + 1) % len(self._ports)
                if _bindable(port):
                    return port
        raise RuntimeError(f"no free loopback port in {self._ports}")


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


_pool = PortPool(chosen_range())


def use_share(share: int, shares: int) -> None:
    """Take ports from this process's share only (each of `shares` processes running side by side its own)."""
    global _pool
    _pool = PortPool(chosen_range(), share, shares)


def free_port() -> int:
    """A loopback port nothing listens on now, not handed out by this process lately."""
    return _pool.take()
