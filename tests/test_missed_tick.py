"""A scheduled discovery whose tick came while no replica ran (a restart, a rollout across it) is queued when a
replica starts, once: APScheduler, in memory, knows no tick from before it started, and the next one may be hours
away."""

from __future__ import annotations

import asyncio
import datetime
import time
from pathlib import Path
from typing import Any

from mirror.demo.localregistry import LocalRegistry
from mirror.demo.ports import free_port
from mirror.service.scheduler import missed_tick
from mirror.service.store import JobStore
from tests.test_service import Service, service_config
from tests.test_sync import seed_release

UTC = datetime.UTC


def at(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text).replace(tzinfo=UTC)


def test_the_latest_tick_of_the_last_day_is_the_one_a_start_looks_for() -> None:
    assert missed_tick("0 */6 * * *", at("2026-12-05T13:05:00")) == "schedule:2026-12-05T12:00:00Z"
    assert missed_tick("30 1 * * *", at("2026-12-05T01:29:00")) == "schedule:2026-12-04T01:30:00Z"
    assert missed_tick("*/2 * * * * *", at("2026-12-05T13:05:07")) == "schedule:2026-12-05T13:05:06Z"
    assert missed_tick("0 0 1 1 *", at("2026-12-05T13:05:00")) is None  # a year ago: not caught up


def scheduled(running: Service) -> list[dict[str, Any]]:
    return [job for job in running.jobs() if job["kind"] == "schedule"]


def start_and_look(config: Path) -> tuple[list[dict[str, Any]], str]:
    """Start the service, wait until it has looked for a missed tick (and run what it queued), stop it: its
    scheduled jobs, and what it logged."""
    running = Service(config, free_port())
    running.start()
    try:
        deadline = time.monotonic() + 60
        while "scheduled discovery" not in running.log.read_text() or "missed" not in running.log.read_text():
            assert time.monotonic() < deadline, running.log.read_text()
            time.sleep(0.2)
        for job in scheduled(running):
            assert running.wait_done(job["id"])["state"] == "succeeded", job
        found = scheduled(running)
    finally:
        assert running.stopped_cleanly()
    log = running.log.read_text()
    running.log.unlink()
    return found, log


async def ran_a_tick_before(store: JobStore, delivery: str) -> None:
    """A scheduled job of an earlier tick, run and finished: the service ran on its schedule before."""
    await store.enqueue("schedule", None, delivery)
    job = await store.claim_next("an-earlier-replica", 60)
    assert job is not None
    assert await store.finish(job["id"], "an-earlier-replica", "succeeded", [], None)


def test_a_tick_missed_while_no_replica_ran_is_queued_at_start_once(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry
) -> None:
    seed_release(source)
    earlier = datetime.datetime.now(UTC) - datetime.timedelta(hours=2)
    schedule = f"{earlier.minute} {earlier.hour} * * *"  # daily, two hours ago: the next tick is 22 hours away
    config = service_config(tmp_path, source, target, schedule=schedule)

    found, log = start_and_look(config)  # a first install: no tick was missed, none is queued
    assert found == [] and "no scheduled discovery was missed" in log

    store = JobStore(f"sqlite:///{tmp_path / 'state' / 'mirror.db'}")
    try:
        asyncio.run(ran_a_tick_before(store, "schedule:2026-01-01T00:00:00Z"))
    finally:
        store.close()
    found, log = start_and_look(config)
    assert "was missed while no replica ran: queuing it now" in log
    assert len(found) == 2 and found[0]["state"] == "succeeded"  # newest first: the tick caught up, run

    again, log = start_and_look(config)  # its tick is answered now
    assert "no scheduled discovery was missed" in log and [j["id"] for j in again] == [j["id"] for j in found]
