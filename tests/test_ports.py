"""Ports for local servers: never one another worker's server holds, never one a stopped server just let go."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from mirror.demo.localregistry import PortTaken, start_registry
from mirror.demo.ports import PortPool, chosen_range, free_port


def test_ports_come_from_below_the_kernels_ephemeral_range_or_above_it_when_it_starts_low() -> None:
    assert chosen_range((32768, 60999)) == range(20768, 32768)
    assert chosen_range((1024, 60999)) == range(61000, 65536)
    assert all(free_port() in chosen_range() for _ in range(20))


def test_side_by_side_shares_are_disjoint_and_each_goes_round_before_it_repeats() -> None:
    ports = range(21000, 21200)
    first, second = PortPool(ports, 0, 2), PortPool(ports, 1, 2)
    taken_first = [first.take() for _ in range(100)]
    taken_second = [second.take() for _ in range(100)]
    assert len(set(taken_first)) == 100 and len(set(taken_second)) == 100
    assert not set(taken_first) & set(taken_second)
    with pytest.raises(ValueError, match="share 2 is not one of 2"):
        PortPool(ports, 2, 2)


def test_a_port_something_listens_on_is_passed_over() -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        with pytest.raises(RuntimeError, match="no free loopback port"):
            PortPool(range(port, port + 1)).take()
    assert PortPool(range(port, port + 1)).take() == port  # let go: free again


def test_a_registry_never_takes_another_servers_answer_for_its_own(tmp_path: Path) -> None:
    """The second registry cannot bind the first one's port; the first answers /v2/ meanwhile."""
    first = start_registry(tmp_path / "first")
    try:
        with pytest.raises(PortTaken):
            start_registry(tmp_path / "second", port=first.port)
        assert first.process.poll() is None
    finally:
        first.stop()
