"""A webhook for a release whose job is running makes one follow-up job, waiting, instead of joining the running
one, which may have looked at the source before the announced image was there (Docker Hub sends one push per image,
minutes apart). Per release: at most one job queued or running, and one waiting; the follow-up is queued once the
running job has ended, and other releases' jobs are not held up meanwhile. On SQLite and on a real PostgreSQL (a
database of the version before, and one of the unreleased two-index schema, opened in place), and through a real
`mirror serve`."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from sqlalchemy import create_engine, inspect, text

from mirror.demo.localregistry import LocalRegistry
from mirror.demo.ports import free_port
from mirror.service.store import FAILED, QUEUED, RUNNING, SUCCEEDED, WAITING, JobStore
from tests.test_crash import wait_for
from tests.test_service import DOCKERHUB_TOKEN, Service, service_config, target_lock_held
from tests.test_store import FakeClock
from tests.test_sync import VERSION, seed_release

OTHER = "v2.11.0"


async def running_job(store: JobStore, clock: FakeClock) -> str:
    job, _ = await store.enqueue("ci", [VERSION], "release-published")
    claimed = await store.claim_next("runner", 60)
    assert claimed is not None and claimed["id"] == job["id"]
    clock.advance(1)
    return str(job["id"])


async def test_pushes_while_the_release_runs_queue_one_follow_up(job_store: JobStore, clock: FakeClock) -> None:
    running = await running_job(job_store, clock)
    pushes = await asyncio.gather(*(job_store.enqueue("dockerhub", [VERSION], None, 600) for _ in range(8)))
    assert sum(created for _, created in pushes) == 1
    (follow_up,) = {job["id"] for job, _ in pushes}
    assert follow_up != running and all(job["state"] == WAITING for job, _ in pushes)
    assert await job_store.claim_next("another", 60) is None  # it waits for the running job of its release
    other, _ = await job_store.enqueue("ci", [OTHER], None)
    taken = await job_store.claim_next("another", 60)
    assert taken is not None and taken["id"] == other["id"]  # other releases are not held up
    assert await job_store.finish(running, "runner", FAILED, [], "hami-webui: tag not found")
    assert (await job_store.get(follow_up) or {})["state"] == QUEUED  # queued as the running job ended
    next_up = await job_store.claim_next("runner", 60)
    assert next_up is not None and next_up["id"] == follow_up and next_up["state"] == RUNNING


async def test_a_running_job_whose_lease_ran_out_runs_again_before_its_follow_up(
    job_store: JobStore, clock: FakeClock
) -> None:
    running = await running_job(job_store, clock)
    follow_up, created = await job_store.enqueue("dockerhub", [VERSION], None)
    assert created
    clock.advance(60)  # its replica died: the lease runs out
    taken = await job_store.claim_next("survivor", 60, max_attempts=2)
    assert taken is not None and taken["id"] == running and taken["attempts"] == 2
    clock.advance(61)  # and again: given up, and the follow-up taken in the same claim
    given_up: list[str] = []
    taken = await job_store.claim_next("last", 60, max_attempts=2, on_give_up=lambda job: given_up.append(job["id"]))
    assert given_up == [running] and taken is not None and taken["id"] == follow_up["id"]
    assert follow_up["state"] == WAITING


async def test_a_job_given_back_with_a_follow_up_queued_ends_and_the_follow_up_runs(
    job_store: JobStore, clock: FakeClock
) -> None:
    running = await running_job(job_store, clock)
    follow_up, _ = await job_store.enqueue("dockerhub", [VERSION], None)
    assert await job_store.release(running, "runner") == FAILED  # a shutdown: the follow-up runs the release
    assert (await job_store.get(follow_up["id"]) or {})["state"] == QUEUED
    ended = await job_store.get(running) or {}
    assert ended["state"] == FAILED and follow_up["id"] in ended["error"] and "shutting down" in ended["error"]
    taken = await job_store.claim_next("another", 60)
    assert taken is not None and taken["id"] == follow_up["id"]
    assert await job_store.release(follow_up["id"], "another") == QUEUED  # none queued behind it: back in line
    assert await job_store.release(follow_up["id"], "another") is None  # no longer held


async def test_a_follow_up_is_queued_after_the_running_job_succeeded_too(job_store: JobStore, clock: FakeClock) -> None:
    """The replay window answers a release that succeeded, but not while a job of it runs: a follow-up."""
    running = await running_job(job_store, clock)
    follow_up, created = await job_store.enqueue("dockerhub", [VERSION], None, 600)
    assert created
    assert await job_store.finish(running, "runner", SUCCEEDED, [], None)
    joined, created = await job_store.enqueue("dockerhub", [VERSION], None, 600)
    assert joined["id"] == follow_up["id"] and not created


# The tables as the version before made them: one queued or running job per release (a single partial index)
PREVIOUS_SCHEMA = (
    "CREATE TABLE jobs (id VARCHAR(32) NOT NULL PRIMARY KEY, kind VARCHAR(16) NOT NULL, versions TEXT, "
    "release_key VARCHAR(200) NOT NULL, delivery VARCHAR(200) UNIQUE, state VARCHAR(16) NOT NULL, "
    "created_at FLOAT NOT NULL, started_at FLOAT, finished_at FLOAT, owner VARCHAR(100), lease_expires_at FLOAT, "
    "attempts INTEGER NOT NULL DEFAULT 0, result TEXT, error TEXT)",
    "CREATE TABLE deliveries (delivery VARCHAR(200) NOT NULL PRIMARY KEY, job_id VARCHAR(32) NOT NULL)",
    "CREATE INDEX ix_jobs_state ON jobs (state)",
    "CREATE UNIQUE INDEX jobs_one_active_per_release ON jobs (release_key) WHERE state IN ('queued', 'running')",
    "CREATE INDEX jobs_newest_first ON jobs (created_at, id)",
    "INSERT INTO jobs (id, kind, versions, release_key, delivery, state, created_at, started_at, owner, "
    "lease_expires_at, attempts) VALUES ('running-before', 'ci', '[\"v2.10.0\"]', '[\"v2.10.0\"]', 'delivery-1', "
    "'running', 1, 2, 'old-replica', 4000000000, 1)",
    "INSERT INTO deliveries (delivery, job_id) VALUES ('delivery-1', 'running-before')",
)


async def test_a_database_of_the_version_before_is_upgraded(store_url: str, clock: FakeClock) -> None:
    engine = create_engine(store_url)
    with engine.begin() as db:
        for statement in PREVIOUS_SCHEMA:
            db.execute(text(statement))
    JobStore(store_url, clock=clock).close()  # upgraded once; opening it again changes nothing
    store = JobStore(store_url, clock=clock)
    try:
        indexes = {index["name"] for index in inspect(engine).get_indexes("jobs")}
        assert {"jobs_one_active_per_release", "jobs_one_waiting_per_release"} <= indexes  # the old one kept
        follow_up, created = await store.enqueue("dockerhub", [VERSION], None)
        assert created and follow_up["id"] != "running-before" and follow_up["state"] == WAITING
        assert (await store.enqueue("ci", [VERSION], "delivery-1"))[0]["id"] == "running-before"
        assert await store.claim_next("upgraded", 60) is None  # the old replica's job still runs
    finally:
        store.close()
        engine.dispose()


# What the unreleased two-index schema left: a follow-up queued beside its release's running job
UNRELEASED_INDEXES = (
    "DROP INDEX jobs_one_active_per_release",
    "CREATE UNIQUE INDEX jobs_one_queued_per_release ON jobs (release_key) WHERE state = 'queued'",
    "CREATE UNIQUE INDEX jobs_one_running_per_release ON jobs (release_key) WHERE state = 'running'",
    "INSERT INTO jobs (id, kind, versions, release_key, state, created_at, attempts) VALUES "
    "('queued-beside', 'dockerhub', '[\"v2.10.0\"]', '[\"v2.10.0\"]', 'queued', 3, 0)",
)


async def test_a_database_of_the_two_index_schema_gets_the_old_index_back(store_url: str, clock: FakeClock) -> None:
    engine = create_engine(store_url)
    with engine.begin() as db:
        for statement in PREVIOUS_SCHEMA + UNRELEASED_INDEXES:
            db.execute(text(statement))
    store = JobStore(store_url, clock=clock)
    try:
        indexes = {index["name"] for index in inspect(engine).get_indexes("jobs")}
        assert {"jobs_one_active_per_release", "jobs_one_waiting_per_release"} <= indexes
        assert not {"jobs_one_queued_per_release", "jobs_one_running_per_release"} & indexes
        assert (await store.get("queued-beside") or {})["state"] == WAITING  # it waits for the running job
        assert await store.claim_next("upgraded", 60) is None
    finally:
        store.close()
        engine.dispose()


def test_a_push_while_the_release_runs_is_mirrored_by_a_follow_up_job(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry
) -> None:
    """The release's job is running (held at its target's lock); Docker Hub's pushes then queue one follow-up,
    answered 202 with its id, and it runs once the first job is done."""
    seed_release(source)
    push = json.dumps({"push_data": {"tag": VERSION}, "repository": {"repo_name": "projecthami/hami"}}).encode()
    with target_lock_held(tmp_path, target, None):
        service = Service(service_config(tmp_path, source, target), free_port())
        service.start()
        try:
            first = service.signed({"version": VERSION}).json()["id"]
            wait_for(lambda: "waiting for another mirror sync" in service.log.read_text(), 30)
            answers = [service.post(f"/hooks/dockerhub/{DOCKERHUB_TOKEN}", push) for _ in range(3)]
            assert [answer.status_code for answer in answers] == [202] * 3, answers[0].text
            follow_up = answers[0].json()["id"]
            assert follow_up != first and all(answer.json()["id"] == follow_up for answer in answers)
            assert [answer.json()["duplicate"] for answer in answers] == [False, True, True]
            assert service.job(follow_up)["state"] == "waiting" and service.job(first)["state"] == "running"
        except BaseException:
            service.stop()
            raise
    try:
        assert service.wait_done(first)["state"] == "succeeded"
        done = service.wait_done(follow_up)
        assert done["state"] == "succeeded" and done["started_at"] >= service.job(first)["finished_at"]
    finally:
        assert service.stopped_cleanly()
