"""GitHub's "Redeliver" sends a delivery again with the same X-GitHub-Delivery id: the way to recover after a
failure. A delivery id answers its job for as long as that job is queued, running or succeeded; once it failed
(or was given up), the same id queues a new job (or joins the release's queued one) and answers that one from
then on. On SQLite and on a real PostgreSQL, and through a real `mirror serve`."""

from __future__ import annotations

import asyncio
from typing import Any

from mirror.demo.localregistry import LocalRegistry
from mirror.service.store import FAILED, QUEUED, SUCCEEDED, JobStore, jobs
from tests.test_service import Service
from tests.test_store import FakeClock
from tests.test_sync import VERSION, seed_release

GUID = "72d3162e-cc78-11e3-81ab-4c9367dc0958"
WINDOW = 600.0  # the service's replay window


async def run_to_end(store: JobStore, job_id: str, state: str) -> None:
    claimed = await store.claim_next("runner", 60)
    assert claimed is not None and claimed["id"] == job_id
    assert await store.finish(job_id, "runner", state, [], None if state == SUCCEEDED else "503 Service Unavailable")


async def test_a_redelivery_after_a_failed_job_queues_a_new_one(job_store: JobStore) -> None:
    failed, created = await job_store.enqueue("ci", [VERSION], GUID, done_within=WINDOW)
    assert created
    await run_to_end(job_store, failed["id"], FAILED)
    again, created = await job_store.enqueue("ci", [VERSION], GUID, done_within=WINDOW)
    assert created and again["id"] != failed["id"] and again["state"] == QUEUED
    resent, created = await job_store.enqueue("ci", [VERSION], GUID, done_within=WINDOW)
    assert resent["id"] == again["id"] and not created  # the new job answers it now
    await run_to_end(job_store, again["id"], SUCCEEDED)
    after_success, created = await job_store.enqueue("ci", [VERSION], GUID, done_within=WINDOW)
    assert after_success["id"] == again["id"] and not created  # a success answers it for good
    assert len(await job_store.recent()) == 2


async def test_a_scheduled_tick_whose_job_failed_is_not_run_again_for_the_same_fire_time(job_store: JobStore) -> None:
    """A replica late to the tick (a skewed clock, a job store outage waited out) found the first replica's job
    failed fast (a login refused) and queued the discovery again: a second run, a second failure posted."""
    tick = "schedule:2026-12-05T06:00:00Z"
    first, created = await job_store.enqueue("schedule", None, tick)
    assert created
    await run_to_end(job_store, first["id"], FAILED)
    late, created = await job_store.enqueue("schedule", None, tick)
    assert late["id"] == first["id"] and not created
    following, created = await job_store.enqueue("schedule", None, "schedule:2026-12-05T12:00:00Z")
    assert created and following["id"] != first["id"]  # the next tick runs


async def test_a_redelivery_joins_the_releases_queued_job(job_store: JobStore) -> None:
    failed, _ = await job_store.enqueue("ci", [VERSION], GUID)
    await run_to_end(job_store, failed["id"], FAILED)
    queued, created = await job_store.enqueue("dockerhub", [VERSION], None)
    assert created
    joined, created = await job_store.enqueue("ci", [VERSION], GUID, done_within=WINDOW)
    assert joined["id"] == queued["id"] and not created
    await run_to_end(job_store, queued["id"], FAILED)  # the job it joined fails too: sent again, a new one
    retried, created = await job_store.enqueue("ci", [VERSION], GUID, done_within=WINDOW)
    assert created and retried["id"] not in (failed["id"], queued["id"])


async def test_a_delivery_merged_into_a_job_that_failed_queues_a_new_one(job_store: JobStore) -> None:
    first, _ = await job_store.enqueue("ci", [VERSION], "the-first-delivery")
    merged, created = await job_store.enqueue("ci", [VERSION], GUID)
    assert merged["id"] == first["id"] and not created
    await run_to_end(job_store, first["id"], FAILED)
    again, created = await job_store.enqueue("ci", [VERSION], GUID)
    assert created and again["id"] != first["id"]
    assert (await job_store.enqueue("ci", [VERSION], "the-first-delivery"))[0]["id"] == again["id"]


async def test_a_redelivery_after_a_job_was_given_up_queues_a_new_one(job_store: JobStore) -> None:
    clock = job_store.clock
    assert isinstance(clock, FakeClock)
    poison, _ = await job_store.enqueue("ci", [VERSION], GUID)
    for replica in ("a", "b"):  # each replica dies running it: its lease runs out
        assert await job_store.claim_next(replica, 60, max_attempts=2) is not None
        clock.advance(61)
    given_up: list[dict[str, Any]] = []
    assert await job_store.claim_next("c", 60, max_attempts=2, on_give_up=given_up.append) is None
    assert [job["id"] for job in given_up] == [poison["id"]]
    again, created = await job_store.enqueue("ci", [VERSION], GUID)
    assert created and again["id"] != poison["id"]


async def test_a_redelivery_of_a_job_from_before_the_deliveries_table_queues_a_new_one(job_store: JobStore) -> None:
    """A job an older mirror recorded with its delivery in its own column only, which then failed."""
    with job_store.engine.begin() as db:
        old = {"id": "old-job", "kind": "ci", "versions": f'["{VERSION}"]', "release_key": f'["{VERSION}"]'}
        db.execute(jobs.insert().values(**old, delivery=GUID, state=FAILED, created_at=1.0, finished_at=2.0))
    again, created = await job_store.enqueue("ci", [VERSION], GUID)
    assert created and again["id"] != "old-job" and again["delivery"] == GUID
    resent, created = await job_store.enqueue("ci", [VERSION], GUID)
    assert resent["id"] == again["id"] and not created


async def test_concurrent_redeliveries_queue_one_job(job_store: JobStore) -> None:
    failed, _ = await job_store.enqueue("ci", [VERSION], GUID)
    await run_to_end(job_store, failed["id"], FAILED)
    answers = await asyncio.gather(*(job_store.enqueue("ci", [VERSION], GUID, WINDOW) for _ in range(12)))
    assert sum(created for _, created in answers) == 1
    assert len({job["id"] for job, _ in answers}) == 1 and answers[0][0]["id"] != failed["id"]


def test_github_redeliver_after_a_failed_job_mirrors_the_release(service: Service, source: LocalRegistry) -> None:
    """The release is not on the source yet: the job fails. Once it is, the delivery GitHub sends again (same id)
    queues a job that mirrors it; sent once more, it is answered with that job."""
    first = service.signed({"version": VERSION}, delivery=GUID)
    assert first.status_code == 202, first.text
    assert service.wait_done(first.json()["id"])["state"] == "failed"
    seed_release(source)
    redelivered = service.signed({"version": VERSION}, delivery=GUID)
    assert redelivered.status_code == 202, redelivered.text
    assert redelivered.json()["id"] != first.json()["id"] and redelivered.json()["duplicate"] is False
    assert service.wait_done(redelivered.json()["id"])["state"] == "succeeded"
    once_more = service.signed({"version": VERSION}, delivery=GUID)
    assert once_more.status_code == 200 and once_more.json()["id"] == redelivered.json()["id"]
    assert once_more.json()["duplicate"] is True
