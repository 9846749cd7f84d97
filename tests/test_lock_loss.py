"""A target's PostgreSQL advisory lock lost under a run (its session ended: a server restart, a failover, an
idle timeout, `pg_terminate_backend`), on a real PostgreSQL and Debian's docker-registry: the run finds out,
stops as at shutdown (nothing new starts, in-flight uploads get their grace) and ends with LockLost, while
another run may take the lock."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

from mirror.demo.localregistry import LocalRegistry
from mirror.engine import lock
from mirror.engine.lock import AdvisoryLock, LockLost
from mirror.engine.shutdown import Shutdown
from mirror.engine.sync import sync
from mirror.engine.target import SyncOptions
from mirror.progress import Progress
from mirror.service.metrics import Metrics
from mirror.service.runner import JobRunner
from mirror.service.store import JobStore
from mirror.settings import load_settings
from tests.support import held_source, write_config
from tests.test_sync import VERSION, seed_release

TERMINATED_WITHIN_MS = 60_000
LOCKS_OF_OTHERS = "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND pid <> pg_backend_pid()"


def _terminate_lock_sessions(url: str) -> int:
    """End every session holding an advisory lock, as a server restart or an idle timeout would. Each is waited
    for until it has ended (it lets go of its locks as it ends, not when it is told to)."""
    with psycopg.connect(url.replace("postgresql+psycopg", "postgresql"), autocommit=True) as db:
        pids = [row[0] for row in db.execute(LOCKS_OF_OTHERS).fetchall()]
        for pid in pids:
            db.execute("SELECT pg_terminate_backend(%s, %s)", (pid, TERMINATED_WITHIN_MS))
    return len(pids)


async def _until(condition: Callable[[], bool], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting: {what}"
        await asyncio.sleep(0.05)


def _writes(target: LocalRegistry) -> list[str]:
    return [f"{e.method} {e.path}" for e in target.access_log() if e.method in ("POST", "PUT", "PATCH")]


def test_a_run_whose_lock_session_ends_stops_and_says_so(
    tmp_path: Path, target: LocalRegistry, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lock, "LOCK_CHECK_SECONDS", 1.0, raising=False)  # the default is 5 s: a quicker test
    with held_source(tmp_path / "source", serve_first=0) as (source, cdn):
        seed_release(source)
        config = write_config(tmp_path / "mirror.yaml", source, [target], database_url=database_url, shutdown_grace=1)
        settings = load_settings(config)
        shutdown = Shutdown()

        async def scenario() -> tuple[BaseException | None, bool]:
            run = asyncio.ensure_future(sync(settings, [VERSION], SyncOptions(), Progress(), shutdown))
            await _until(lambda: cdn.held > 0, 60, "the run holds the target lock, mid-copy")
            assert await asyncio.to_thread(_terminate_lock_sessions, database_url) == 1
            # the database let go of it: another run takes it now
            other = AdvisoryLock(database_url, lock.lock_name(target.host, "mirrored"))
            try:
                taken = await other.try_acquire()
                await _until(lambda: shutdown.stopping, 60, "the run noticed its lost lock")
            finally:
                await other.close()
            try:
                await asyncio.wait_for(run, 120)
            except BaseException as exc:  # what the run ended with
                return exc, taken
            return None, taken

        ended, taken = asyncio.run(scenario())
    assert taken
    assert isinstance(ended, LockLost), ended
    assert f"lost the target lock on {lock.lock_name(target.host, 'mirrored')}" in str(ended)
    assert "session" in str(ended)
    assert not [w for w in _writes(target) if "/manifests/" in w]  # no manifest, no tag: nothing new started


def test_mirror_sync_whose_lock_is_lost_exits_1_naming_the_lock_not_sigterm(
    tmp_path: Path, target: LocalRegistry, database_url: str
) -> None:
    """The command's exit for a lost lock: 1 and the lock's line. A lost lock stops the run as SIGTERM does,
    but the run was not told to stop (143 would send whoever reads the CronJob's log after a signal)."""
    with held_source(tmp_path / "source", serve_first=0) as (source, cdn):
        seed_release(source)
        config = write_config(tmp_path / "mirror.yaml", source, [target], database_url=database_url, shutdown_grace=1)
        command = [sys.executable, "-m", "mirror", "sync", VERSION, "--config", str(config)]
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while cdn.held == 0:  # the run holds the target lock, mid-copy
            assert time.monotonic() < deadline and process.poll() is None, "the run never started copying"
            time.sleep(0.05)
        assert _terminate_lock_sessions(database_url) == 1
        _, err = process.communicate(timeout=120)
    assert process.returncode == 1, err
    assert f"lost the target lock on {lock.lock_name(target.host, 'mirrored')}" in err
    assert "SIGTERM" not in err and "Traceback" not in err


@pytest.mark.parametrize(("max_attempts", "ends"), [(3, "queued"), (1, "failed")])
def test_a_service_job_whose_lock_is_lost_goes_back_to_the_queue(
    tmp_path: Path,
    target: LocalRegistry,
    database_url: str,
    monkeypatch: pytest.MonkeyPatch,
    max_attempts: int,
    ends: str,
) -> None:
    """In `mirror serve` a lost target lock (a database failover) is not the job's failure: it goes back to the
    queue for its next run, which waits for the lock. It was recorded failed and announced, the release left
    unsynced. Its attempt counts, and on its last attempt it fails: a database that keeps losing locks would
    otherwise run it for ever (a queued job is claimed whatever its count)."""
    monkeypatch.setattr(lock, "LOCK_CHECK_SECONDS", 1.0, raising=False)
    with held_source(tmp_path / "source", serve_first=0) as (source, cdn):
        seed_release(source)
        service = {"max_attempts": max_attempts}
        config = write_config(
            tmp_path / "mirror.yaml", source, [target], database_url=database_url, shutdown_grace=1, service=service
        )
        settings = load_settings(config)
        store = JobStore(database_url)

        async def scenario() -> dict[str, Any] | None:
            runner = JobRunner(settings, store, Metrics())
            queued, _ = await store.enqueue("ci", [VERSION], "delivery-1")
            job = await store.claim_next(runner.owner, 60)
            assert job is not None and job["id"] == queued["id"]
            run = asyncio.ensure_future(runner.run(job))
            await _until(lambda: cdn.held > 0, 60, "the job holds the target lock, mid-copy")
            assert await asyncio.to_thread(_terminate_lock_sessions, database_url) == 1
            await asyncio.wait_for(run, 120)
            return await store.get(job["id"])

        try:
            after = asyncio.run(scenario())
        finally:
            store.close()
    assert after is not None
    assert (after["state"], after["attempts"]) == (ends, 1)
    assert after["owner"] is None if ends == "queued" else "lost the target lock" in after["error"]
