"""The service's job runner outlives an error of mirror's own past a job's record: the next job is still run."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from mirror.demo.localregistry import LocalRegistry
from mirror.engine.lock import FileLock, lock_dir, lock_name
from mirror.report import ReleaseResult
from mirror.service.metrics import Metrics
from mirror.service.runner import JobRunner
from mirror.service.store import JobStore
from mirror.settings import load_settings
from tests.support import write_config
from tests.test_sync import VERSION, seed_release

WAIT = 120.0  # seconds two small jobs may take on a busy machine


class FailingOnce(Metrics):
    """The metrics of a job that raise, as a bug in them would, after the job's outcome was recorded."""

    def __init__(self) -> None:
        super().__init__()
        self.failed = False

    def observe(self, results: list[ReleaseResult], seconds: float, ok: bool, now: float) -> None:
        if not self.failed:
            self.failed = True
            raise RuntimeError("a bug in the metrics")
        super().observe(results, seconds, ok, now)


async def two_jobs(runner: JobRunner, store: JobStore) -> list[dict[str, Any] | None]:
    first, _ = await store.enqueue("ci", [VERSION], "delivery-1")
    second, _ = await store.enqueue("ci", ["v2.11.0"], "delivery-2")  # not at the source: it fails, recorded
    runner.start()
    deadline = time.monotonic() + WAIT
    try:
        while (await store.get(second["id"]) or {}).get("finished_at") is None:
            assert time.monotonic() < deadline, "the second job was never run"
            await asyncio.sleep(0.1)
        assert runner.running
    finally:
        await runner.stop(1)
    return [await store.get(first["id"]), await store.get(second["id"])]


def test_an_error_after_a_jobs_record_does_not_stop_the_runner(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, caplog: pytest.LogCaptureFixture
) -> None:
    seed_release(source)
    settings = load_settings(write_config(tmp_path / "mirror.yaml", source, [target]))
    store = JobStore(f"sqlite:///{tmp_path / 'jobs.db'}")
    metrics = FailingOnce()
    try:
        first, second = asyncio.run(two_jobs(JobRunner(settings, store, metrics), store))
    finally:
        store.close()
    assert metrics.failed and first is not None and second is not None
    assert (first["state"], second["state"]) == ("succeeded", "failed")
    assert "tag not found" in (second["error"] or "")
    logged = [r.getMessage() for r in caplog.records if r.levelname == "ERROR" and r.exc_info]
    assert logged == [f"job {first['id']}: an error after its run; the runner goes on to the next job"]


@pytest.mark.parametrize(("max_attempts", "ends"), [(3, "queued"), (1, "failed")])
def test_a_job_that_waited_for_its_target_lock_past_the_timeout_goes_back_to_the_queue(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, max_attempts: int, ends: str
) -> None:
    """Another run (the CronJob's cold copy, another replica's discovery) held the target past `lock_timeout`:
    the job goes back to the queue for its next run, where it was failed and announced, the release left unsynced
    until someone sent its webhook again. Its attempt counts: the last one fails it."""
    seed_release(source)
    config = write_config(
        tmp_path / "mirror.yaml", source, [target], lock_timeout=1, service={"max_attempts": max_attempts}
    )
    settings = load_settings(config)
    store = JobStore(f"sqlite:///{tmp_path / 'jobs.db'}")
    held = settings.targets[0]
    holder = FileLock(lock_dir(settings) / lock_name(held.registry, held.namespace))

    async def scenario() -> dict[str, Any] | None:
        assert await holder.try_acquire()  # another run's, held throughout
        try:
            runner = JobRunner(settings, store, Metrics())
            queued, _ = await store.enqueue("ci", [VERSION], "delivery-1")
            job = await store.claim_next(runner.owner, 60)
            assert job is not None and job["id"] == queued["id"]
            await asyncio.wait_for(runner.run(job), WAIT)
            return await store.get(job["id"])
        finally:
            await holder.close()

    try:
        after = asyncio.run(scenario())
    finally:
        store.close()
    assert after is not None and (after["state"], after["attempts"]) == (ends, 1)
    if ends == "failed":
        assert "lock" in (after["error"] or "")
    else:
        assert after["owner"] is None
