"""A scheduled discovery whose tick came while no replica ran (a restart, a rollout across it) is queued when a
replica starts, once: APScheduler, in memory, knows no tick from before it started, and the next one may be hours
away."""

from __future__ import annotations

import datetime
import time
from pathlib import Path

from mirror.demo.localregistry import LocalRegistry
from mirror.demo.ports import free_port
from mirror.service.scheduler import missed_tick
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


def test_a_tick_missed_while_no_replica_ran_is_queued_at_start_once(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry
) -> None:
    seed_release(source)
    earlier = datetime.datetime.now(UTC) - datetime.timedelta(hours=2)
    schedule = f"{earlier.minute} {earlier.hour} * * *"  # daily, two hours ago: the next tick is 22 hours away
    config = service_config(tmp_path, source, target, schedule=schedule)
    for start in ("first", "again"):
        running = Service(config, free_port())
        running.start()
        try:
            deadline = time.monotonic() + 60
            while not (scheduled := [j for j in running.jobs() if j["kind"] == "schedule"]):
                assert time.monotonic() < deadline, running.log.read_text()
                time.sleep(0.2)
            job = running.wait_done(scheduled[0]["id"])
            while "no scheduled discovery was missed" not in running.log.read_text() and start == "again":
                assert time.monotonic() < deadline, running.log.read_text()
                time.sleep(0.2)
            scheduled = [j for j in running.jobs() if j["kind"] == "schedule"]
        finally:
            assert running.stopped_cleanly()
        assert job["state"] == "succeeded", job["error"]
        assert len(scheduled) == 1, (start, scheduled)  # the second start finds the tick answered
    log = running.log.read_text()
    assert log.count("was missed while no replica ran: queuing it now") == 1
