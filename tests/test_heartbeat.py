"""The service's heartbeat file, whose age the Deployment's liveness probe reads, goes stale only when the event
loop stops: not while the shared thread pool is full (a slow database, renders, SDK calls all wait there)."""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from mirror.service.heartbeat import beat

BOUND = 10.0  # seconds: a beat every 0.05 s touches the file many times within this


def modified(path: Path) -> int | None:
    return path.stat().st_mtime_ns if path.exists() else None


async def touches_while_the_pool_is_full(alive: Path) -> int:
    loop = asyncio.get_running_loop()
    loop.set_default_executor(ThreadPoolExecutor(max_workers=1))
    held = threading.Event()
    blocked = asyncio.ensure_future(asyncio.to_thread(held.wait))  # the pool's one worker, taken
    beating = asyncio.ensure_future(beat(alive, every=0.05))
    seen: set[int] = set()
    deadline = time.monotonic() + BOUND
    try:
        while len(seen) < 3 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
            if (touched := modified(alive)) is not None:
                seen.add(touched)
    finally:
        beating.cancel()
        held.set()
        await blocked
    return len(seen)


def test_the_heartbeat_goes_on_while_the_thread_pool_is_full(tmp_path: Path) -> None:
    assert asyncio.run(touches_while_the_pool_is_full(tmp_path / "alive")) >= 3


def test_the_heartbeat_stops_when_the_job_runner_has_stopped(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A service whose runner ended answers webhooks that no job runner takes: the file goes stale, so the
    liveness probe restarts it."""
    alive, beats = tmp_path / "alive", iter([True, True, False])
    asyncio.run(asyncio.wait_for(beat(alive, every=0.01, running=lambda: next(beats)), BOUND))
    assert alive.exists()
    assert [r.getMessage() for r in caplog.records if r.levelname == "ERROR"] == [
        "the job runner has stopped: the heartbeat stops with it, so the liveness probe restarts the service"
    ]
