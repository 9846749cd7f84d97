"""Upgrading from a mirror whose job table had no leases, on SQLite and on a real PostgreSQL: a job that
version left running (its pod killed mid-job by the upgrade) has no lease to run out. It is claimed again, and
given up by the same rules as any other, instead of holding its release (or every scheduled discovery) for
ever."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from mirror.service.store import FAILED, RUNNING, SUCCEEDED, JobStore
from tests.test_store import FakeClock

# The table as the version before leases made it (SQLAlchemy's create_all of its metadata), with a job of
# each kind it left running: a scheduled discovery and a release from CI.
OLD_TABLE = (
    "CREATE TABLE jobs (id VARCHAR(32) NOT NULL PRIMARY KEY, kind VARCHAR(16) NOT NULL, versions TEXT, "
    "delivery VARCHAR(200) UNIQUE, state VARCHAR(16) NOT NULL, created_at FLOAT NOT NULL, started_at FLOAT, "
    "finished_at FLOAT, result TEXT, error TEXT)"
)
OLD_STATE_INDEX = "CREATE INDEX ix_jobs_state ON jobs (state)"
LEFT_RUNNING = (
    "INSERT INTO jobs (id, kind, versions, delivery, state, created_at, started_at) VALUES "
    "('old-discovery', 'schedule', NULL, NULL, 'running', 1, 2), "
    "('old-release', 'ci', '[\"v2.9.0\"]', 'delivery-1', 'running', 3, 4)"
)


@pytest.fixture(params=["sqlite", "postgresql"])
def old_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A database holding the older version's table, with the jobs it left running."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'jobs.db'}"
    else:
        url = str(request.getfixturevalue("postgres").new_database())
    engine = create_engine(url)
    with engine.begin() as db:
        for statement in (OLD_TABLE, OLD_STATE_INDEX, LEFT_RUNNING):
            db.execute(text(statement))
    engine.dispose()
    return url


async def test_a_job_left_running_without_a_lease_is_claimed_again(old_url: str) -> None:
    clock = FakeClock()
    store = JobStore(old_url, clock=clock)
    try:
        follow_up, created = await store.enqueue("ci", ["v2.9.0"], "delivery-2")  # it runs: a follow-up waits
        assert created and follow_up["id"] != "old-release"
        first = await store.claim_next("upgraded", 60)
        second = await store.claim_next("upgraded", 60)
        assert first is not None and first["id"] == "old-discovery"
        assert second is not None and second["id"] == "old-release"
        for job in (first, second):
            assert job["state"] == RUNNING and job["owner"] == "upgraded" and job["attempts"] == 1
            assert job["lease_expires_at"] == clock.now + 60
        assert await store.claim_next("other", 60) is None  # under a live lease now; the follow-up waits for it
        assert await store.finish("old-release", "upgraded", SUCCEEDED, [], None)
        later, created = await store.enqueue("ci", ["v2.9.0"], "delivery-3")  # joins the waiting follow-up
        assert later["id"] == follow_up["id"] and not created
        taken = await store.claim_next("other", 60)  # the release flows again
        assert taken is not None and taken["id"] == follow_up["id"]
    finally:
        store.close()


async def test_a_job_left_running_without_a_lease_is_given_up_by_the_same_rules(old_url: str) -> None:
    clock = FakeClock()
    store = JobStore(old_url, clock=clock)
    given_up: list[dict[str, Any]] = []
    try:
        for replica in ("a", "b"):  # each replica that takes the old discovery dies holding it
            claimed = await store.claim_next(replica, 60, max_attempts=2, on_give_up=given_up.append)
            assert claimed is not None and claimed["id"] == "old-discovery"
            clock.advance(61)
        taken = await store.claim_next("c", 60, max_attempts=2, on_give_up=given_up.append)
        assert taken is not None and taken["id"] == "old-release"
        assert [job["id"] for job in given_up] == ["old-discovery"] and given_up[0]["state"] == FAILED
        later, created = await store.enqueue("schedule", None, None)  # the schedule's next discovery runs
        assert created and later["id"] != "old-discovery"
    finally:
        store.close()
