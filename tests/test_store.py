"""The job store's guarantees, on SQLite and on a real PostgreSQL: one job per delivery and per active
release, atomic claims, leases that only expire when not renewed, and old tables upgraded in place."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from mirror.service.store import QUEUED, RUNNING, SUCCEEDED, JobStore
from tests.postgres import Postgres


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[JobStore]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'jobs.db'}"
    else:
        url = request.getfixturevalue("postgres").new_database()
    opened = JobStore(url)
    yield opened
    opened.close()


async def test_one_job_per_delivery_and_per_active_release(store: JobStore) -> None:
    answers = await asyncio.gather(*(store.enqueue("ci", ["v2.10.0"], f"delivery-{i % 3}") for i in range(30)))
    assert len({job["id"] for job, _ in answers}) == 1
    assert sum(created for _, created in answers) == 1
    discovery = await asyncio.gather(*(store.enqueue("schedule", None, None) for _ in range(10)))
    assert len({job["id"] for job, _ in discovery}) == 1
    first = answers[0][0]
    claimed = await store.claim_next("a", 30)
    assert claimed is not None and claimed["id"] == first["id"]
    assert (await store.enqueue("ci", ["v2.10.0"], "another"))[0]["id"] == first["id"]  # running counts as active
    assert await store.finish(first["id"], "a", SUCCEEDED, [], None)
    again, created = await store.enqueue("ci", ["v2.10.0"], "after-it-finished")
    assert created and again["id"] != first["id"]
    assert (await store.enqueue("ci", ["v2.10.0"], first["delivery"]))[0]["id"] == first["id"]  # a delivery is forever
    # so is one that was merged into an active job: resent after that job finished, it starts nothing new
    resent, created = await store.enqueue("ci", ["v2.10.0"], "another")
    assert resent["id"] == first["id"] and not created
    for merged in {f"delivery-{i}" for i in range(3)} - {first["delivery"]}:  # the racing deliveries, too
        assert (await store.enqueue("ci", ["v2.10.0"], merged))[0]["id"] == first["id"]


async def test_concurrent_claims_take_each_job_once(store: JobStore) -> None:
    for version in range(12):
        await store.enqueue("ci", [f"v2.{version + 10}.0"], None)

    async def claimer(name: str) -> list[str]:
        taken = []
        while (job := await store.claim_next(name, 30)) is not None:
            taken.append(job["id"])
        return taken

    claims = await asyncio.gather(*(claimer(f"replica-{i}") for i in range(4)))
    every = [job_id for taken in claims for job_id in taken]
    assert len(every) == 12 and len(set(every)) == 12
    assert all(job["state"] == RUNNING and job["attempts"] == 1 for job in await store.recent())


async def test_a_lease_is_taken_over_only_after_it_expires(store: JobStore) -> None:
    job, _ = await store.enqueue("ci", ["v2.10.0"], None)
    held = await store.claim_next("dead", 1.0)
    assert held is not None and held["owner"] == "dead"
    assert await store.claim_next("alive", 1.0) is None  # the lease is still good
    await asyncio.sleep(0.5)
    assert await store.renew(job["id"], "dead", 1.0)  # renewed: good for another second
    await asyncio.sleep(0.7)
    assert await store.claim_next("alive", 1.0) is None
    await asyncio.sleep(0.5)  # no renewal now: the lease runs out
    taken = await store.claim_next("alive", 30)
    assert taken is not None and taken["id"] == job["id"] and taken["owner"] == "alive" and taken["attempts"] == 2
    assert not await store.renew(job["id"], "dead", 1.0)
    assert not await store.finish(job["id"], "dead", SUCCEEDED, [], None)  # the old owner records nothing
    assert await store.finish(job["id"], "alive", SUCCEEDED, [], None)
    assert (await store.get(job["id"]) or {})["state"] == SUCCEEDED


async def test_a_released_job_is_queued_for_another_replica(store: JobStore) -> None:
    job, _ = await store.enqueue("ci", ["v2.10.0"], None)
    assert await store.claim_next("stopping", 30) is not None
    assert await store.release(job["id"], "stopping")
    assert (await store.get(job["id"]) or {})["state"] == QUEUED
    taken = await store.claim_next("other", 30)
    assert taken is not None and taken["owner"] == "other"


async def test_an_older_table_is_upgraded_in_place(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as db:
        db.execute(
            "CREATE TABLE jobs (id VARCHAR(32) PRIMARY KEY, kind VARCHAR(16) NOT NULL, versions TEXT, "
            "delivery VARCHAR(200) UNIQUE, state VARCHAR(16) NOT NULL, created_at FLOAT NOT NULL, started_at FLOAT, "
            "finished_at FLOAT, result TEXT, error TEXT)"
        )
        db.execute(
            "INSERT INTO jobs (id, kind, versions, state, created_at) VALUES ('old', 'ci', '[\"v2.9.0\"]', 'queued', 1)"
        )
    store = JobStore(f"sqlite:///{path}")
    try:
        claimed = await store.claim_next("new", 30)
        assert claimed is not None and claimed["id"] == "old" and claimed["release_key"] == '["v2.9.0"]'
        assert (await store.enqueue("ci", ["v2.9.0"], None))[0]["id"] == "old"
    finally:
        store.close()


def test_postgres_fixture_gives_each_test_its_own_database(postgres: Postgres) -> None:
    assert postgres.new_database() != postgres.new_database()
