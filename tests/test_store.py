"""The job store's guarantees, on SQLite and on a real PostgreSQL: one job per delivery and per active
release, atomic claims, leases that only expire when not renewed, a job that keeps losing its lease failed
once and by one replica, and old tables upgraded in place. Time is a fake clock the tests move: no test here
waits for a lease to run out."""

from __future__ import annotations

import asyncio
import datetime
import sqlite3
import time
from pathlib import Path
from typing import Any

from mirror.service.page import job_view
from mirror.service.store import DAY, FAILED, QUEUED, RUNNING, SUCCEEDED, WAITING, JobStore
from tests.postgres import Postgres


class FakeClock:
    """Seconds since the epoch, moved only by the test."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


async def test_one_job_per_delivery_and_per_active_release(store: JobStore, clock: FakeClock) -> None:
    answers = await asyncio.gather(*(store.enqueue("ci", ["v2.10.0"], f"delivery-{i % 3}") for i in range(30)))
    assert len({job["id"] for job, _ in answers}) == 1
    assert sum(created for _, created in answers) == 1
    clock.advance(1)  # the discovery job comes second
    discovery = await asyncio.gather(*(store.enqueue("schedule", None, None) for _ in range(10)))
    assert len({job["id"] for job, _ in discovery}) == 1
    first = answers[0][0]
    claimed = await store.claim_next("a", 30)
    assert claimed is not None and claimed["id"] == first["id"]
    # the running job takes no delivery (it may have looked already): one follow-up waits, and takes the next
    follow_up, created = await store.enqueue("ci", ["v2.10.0"], "another")
    assert created and follow_up["id"] != first["id"] and follow_up["state"] == WAITING
    assert await store.finish(first["id"], "a", SUCCEEDED, [], None)
    again, created = await store.enqueue("ci", ["v2.10.0"], "after-it-finished")
    assert not created and again["id"] == follow_up["id"]
    assert (await store.enqueue("ci", ["v2.10.0"], first["delivery"]))[0]["id"] == first["id"]  # a delivery is forever
    # so is one that was merged into a queued job: resent after that job finished, it starts nothing new
    for merged in {f"delivery-{i}" for i in range(3)} - {first["delivery"]}:  # the racing deliveries
        resent, created = await store.enqueue("ci", ["v2.10.0"], merged)
        assert resent["id"] == first["id"] and not created


async def test_a_signed_body_replayed_under_new_delivery_ids_notes_a_bounded_number_of_them(
    store: JobStore, clock: FakeClock
) -> None:
    """GitHub's signature does not cover the delivery id: one captured body sent again under 300 new ids is
    answered by its job each time, and the job notes at most MAX_DELIVERIES_PER_JOB of them (rows a release's
    newest success, never pruned, would otherwise keep for good)."""
    from sqlalchemy import func, select

    from mirror.service.store import MAX_DELIVERIES_PER_JOB, deliveries

    first, _ = await store.enqueue("ci", ["v2.10.0"], "delivery-0")
    answers = [await store.enqueue("ci", ["v2.10.0"], f"delivery-{i}") for i in range(1, 300)]
    assert {job["id"] for job, _ in answers} == {first["id"]} and not any(created for _, created in answers)
    with store.engine.connect() as db:
        noted = db.execute(select(func.count()).select_from(deliveries)).scalar()
    assert noted == MAX_DELIVERIES_PER_JOB
    resent, created = await store.enqueue("ci", ["v2.10.0"], "delivery-0")  # one that was noted still finds it
    assert resent["id"] == first["id"] and not created


async def test_replicas_ticks_of_one_moment_make_one_discovery(store: JobStore) -> None:
    """Each replica queues the schedule's tick under the tick's delivery id: one that comes after another replica's
    job for the same tick was claimed joins that job instead of queueing a second discovery to follow it."""
    first, created = await store.enqueue("schedule", None, "schedule:2026-01-01T06:00:00Z")
    assert created
    claimed = await store.claim_next("a", 30)
    assert claimed is not None and claimed["id"] == first["id"]
    late, created = await store.enqueue("schedule", None, "schedule:2026-01-01T06:00:00Z")
    assert late["id"] == first["id"] and not created
    assert await store.finish(first["id"], "a", SUCCEEDED, [], None)
    following, created = await store.enqueue("schedule", None, "schedule:2026-01-01T12:00:00Z")
    assert created and following["id"] != first["id"] and following["state"] == QUEUED


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


async def test_a_lease_is_taken_over_only_after_it_expires(store: JobStore, clock: FakeClock) -> None:
    job, _ = await store.enqueue("ci", ["v2.10.0"], None)
    held = await store.claim_next("dead", 60)
    assert held is not None and held["owner"] == "dead"
    assert held["started_at"] == clock.now and held["lease_expires_at"] == clock.now + 60
    assert await store.claim_next("alive", 60) is None  # the lease is still good
    clock.advance(30)
    assert await store.renew(job["id"], "dead", 60)  # renewed: good for another minute from now
    clock.advance(59)
    assert await store.claim_next("alive", 60) is None  # past the first lease, within the renewed one
    clock.advance(1)
    assert await store.claim_next("alive", 60) is None  # the lease's last instant still holds
    clock.advance(0.001)  # no renewal now: the lease has run out
    taken = await store.claim_next("alive", 30)
    assert taken is not None and taken["id"] == job["id"] and taken["owner"] == "alive" and taken["attempts"] == 2
    assert not await store.renew(job["id"], "dead", 1.0)
    assert not await store.finish(job["id"], "dead", SUCCEEDED, [], None)  # the old owner records nothing
    clock.advance(5)
    assert await store.finish(job["id"], "alive", SUCCEEDED, [], None)
    done = await store.get(job["id"]) or {}
    assert done["state"] == SUCCEEDED and done["finished_at"] == clock.now and done["created_at"] < clock.now


async def test_a_released_job_is_queued_for_another_replica(store: JobStore) -> None:
    job, _ = await store.enqueue("ci", ["v2.10.0"], None)
    assert await store.claim_next("stopping", 30) is not None
    assert await store.release(job["id"], "stopping")
    released = await store.get(job["id"]) or {}
    assert released["state"] == QUEUED and released["attempts"] == 0  # a shutdown gives its claim back
    assert released["started_at"] is None  # the status page showed it "running for" the hours it waited
    assert job_view(released, time.time() + 7200)["running"] is False
    taken = await store.claim_next("other", 30)
    assert taken is not None and taken["owner"] == "other" and taken["attempts"] == 1


async def test_a_job_whose_lease_keeps_running_out_is_failed_and_the_queue_flows(
    store: JobStore, clock: FakeClock
) -> None:
    poison, _ = await store.enqueue("ci", ["v2.10.0"], None)
    clock.advance(1)
    beside, _ = await store.enqueue("ci", ["v2.11.0"], None)
    given_up: list[dict[str, Any]] = []
    for attempt, replica in enumerate(("replica-a", "replica-b", "replica-c"), start=1):
        claimed = await store.claim_next(replica, 60, max_attempts=3, on_give_up=given_up.append)
        assert claimed is not None and claimed["id"] == poison["id"] and claimed["attempts"] == attempt
        last_lease = claimed["lease_expires_at"]
        clock.advance(61)  # the replica died holding it: its lease runs out
    assert given_up == [] and (await store.get(poison["id"]) or {})["attempts"] == 3
    taken = await store.claim_next("replica-d", 60, max_attempts=3, on_give_up=given_up.append)
    assert taken is not None and taken["id"] == beside["id"]  # the next job flows
    (failed,) = given_up
    assert failed["id"] == poison["id"] and failed["state"] == FAILED and failed["finished_at"] == clock.now
    when = datetime.datetime.fromtimestamp(last_lease, datetime.UTC).isoformat(timespec="seconds")
    assert failed["error"] == (
        f"gave up after 3 attempts: last held by replica-c until {when.replace('+00:00', 'Z')}, when its lease ran"
        " out (each replica that ran it died or stopped answering: out of memory, say)"
    )
    assert (await store.get(poison["id"]) or {})["state"] == FAILED
    clock.advance(61)
    again = await store.claim_next("replica-e", 60, max_attempts=3, on_give_up=given_up.append)
    assert again is not None and again["id"] == beside["id"] and again["attempts"] == 2  # under the limit: retaken
    assert len(given_up) == 1


async def test_released_claims_do_not_count_towards_the_limit(store: JobStore, clock: FakeClock) -> None:
    job, _ = await store.enqueue("ci", ["v2.10.0"], None)
    for replica in ("rolling-1", "rolling-2", "rolling-3", "rolling-4"):  # a rolling restart, four times over
        assert await store.claim_next(replica, 60, max_attempts=2) is not None
        assert await store.release(job["id"], replica)
    assert await store.claim_next("killed", 60, max_attempts=2) is not None
    clock.advance(61)
    retaken = await store.claim_next("survivor", 60, max_attempts=2)
    assert retaken is not None and retaken["id"] == job["id"] and retaken["attempts"] == 2


async def test_replicas_giving_up_at_once_fail_a_job_once(store: JobStore, clock: FakeClock) -> None:
    poisoned = [(await store.enqueue("ci", [f"v2.{minor}.0"], None))[0]["id"] for minor in range(10, 14)]
    died = [await store.claim_next(f"died-{number}", 60, max_attempts=1) for number in range(4)]
    assert sorted(job["id"] for job in died if job is not None) == sorted(poisoned)  # claimed by replicas that died
    healthy = [(await store.enqueue("ci", [f"v2.{minor}.0"], None))[0]["id"] for minor in range(20, 26)]
    clock.advance(61)
    given_up: list[dict[str, Any]] = []
    claims = await asyncio.gather(
        *(store.claim_next(f"replica-{i}", 60, max_attempts=1, on_give_up=given_up.append) for i in range(8))
    )
    assert sorted(job["id"] for job in given_up) == sorted(poisoned)  # each failed by exactly one claim
    taken = [job["id"] for job in claims if job is not None]
    assert sorted(taken) == sorted(healthy)  # each healthy job claimed exactly once
    states = {job["id"]: job["state"] for job in await store.recent(100)}
    assert all(states[i] == FAILED for i in poisoned) and all(states[i] == RUNNING for i in healthy)


async def test_an_error_with_a_nul_byte_is_recorded(store: JobStore) -> None:
    """A registry's message may carry a NUL, which PostgreSQL's text refuses: the outcome is still written."""
    job, _ = await store.enqueue("ci", ["v2.10.0"], None)
    assert await store.claim_next("runner", 30) is not None
    assert await store.finish(job["id"], "runner", FAILED, [], "get manifest: 404 MANIFEST_UNKNOWN: gone\x00away")
    assert (await store.get(job["id"]) or {})["error"] == "get manifest: 404 MANIFEST_UNKNOWN: gone\\x00away"


async def test_without_a_clock_the_database_keeps_the_time(store_url: str) -> None:
    """PostgreSQL's clock (every replica reads the same one), or this machine's for SQLite."""
    store = JobStore(store_url)
    try:
        before = time.time()
        job, _ = await store.enqueue("ci", ["v2.10.0"], None)
        claimed = await store.claim_next("replica", 45)
        assert claimed is not None and claimed["id"] == job["id"]
        assert claimed["lease_expires_at"] == claimed["started_at"] + 45  # one reading per transaction
        assert before - 60 < job["created_at"] <= claimed["started_at"] < time.time() + 60  # the one machine here
        assert await store.finish(job["id"], "replica", SUCCEEDED, [], None)
        done = await store.get(job["id"]) or {}
        assert claimed["started_at"] <= done["finished_at"] < time.time() + 60
    finally:
        store.close()


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
        follow_up, created = await store.enqueue("ci", ["v2.9.0"], None)  # it runs: one follow-up queued behind it
        assert created and follow_up["id"] != "old" and await store.claim_next("new", 30) is None
    finally:
        store.close()


def test_postgres_fixture_gives_each_test_its_own_database(postgres: Postgres) -> None:
    assert postgres.new_database() != postgres.new_database()


async def test_a_jobs_files_are_kept_by_digest_while_a_job_writes_them_and_pruned_after(
    store: JobStore, clock: FakeClock
) -> None:
    """A chart's .tgz written by every run is kept once; a file no job wrote for keep_days goes with the prune."""
    chart, rbac = b"\x1f\x8b chart bytes", b"kind: ClusterRoleBinding\n"
    for written in ({"c" * 64: chart, "r" * 64: rbac}, {"c" * 64: chart}):
        job, _ = await store.enqueue("ci", ["v2.10.0"], None)
        assert await store.claim_next("replica", 30) is not None
        assert await store.finish(job["id"], "replica", SUCCEEDED, [], None, written)
        clock.advance(DAY * 20)
    assert await store.file("c" * 64) == chart and await store.file("r" * 64) == rbac
    await store.prune(keep_days=30, keep_jobs=1000)  # the RBAC file was written 40 days ago, the chart 20
    assert await store.file("c" * 64) == chart and await store.file("r" * 64) is None
    lost, _ = await store.enqueue("ci", ["v2.11.0"], None)
    assert await store.claim_next("replica", 30) is not None
    assert not await store.finish(lost["id"], "gone", SUCCEEDED, [], None, {"x" * 64: b"x"})  # not its lease
    assert await store.file("x" * 64) is None


async def test_an_announcement_owed_is_settled_by_one_caller_and_pruned_when_old(
    store: JobStore, clock: FakeClock
) -> None:
    """Two replicas writing the same release's values at once: one of them announces it. An announcement owed for
    keep_days that no run settled goes with the prune."""
    await store.owe({"v2.10.0 t0", "v2.9.0 t0"})
    first, second = await asyncio.gather(store.settle({"v2.10.0 t0"}), store.settle({"v2.10.0 t0"}))
    assert sorted([first, second], key=len) == [set(), {"v2.10.0 t0"}]
    assert await store.settle({"v2.10.0 t0"}) == set()
    clock.advance(DAY * 40)
    await store.owe({"v2.11.0 t0"})
    await store.prune(keep_days=30, keep_jobs=1000)
    assert await store.settle({"v2.9.0 t0", "v2.11.0 t0"}) == {"v2.11.0 t0"}
