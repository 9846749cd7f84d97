"""Job retention (`service.keep_jobs_days`, `service.keep_jobs`) on SQLite and on a real PostgreSQL: old finished
jobs go with their deliveries, in bounded batches, while jobs still to run and each release's newest success stay;
replicas pruning at once delete each job once; the runner prunes after its jobs, and a prune that fails stops
nothing. And a store that cannot take writes: `writable()` says so on a read-only file system and a read-only
PostgreSQL, and on a real full disk (a small tmpfs in a private mount namespace, as tests/test_disk_full.py makes
one) /readyz is unready and a webhook is told to come back (503, Retry-After), as for a database that is down,
until space is made."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine, event, func, insert, select, text
from sqlalchemy.exc import DBAPIError

from mirror import database
from mirror.demo.localregistry import LocalRegistry
from mirror.demo.ports import free_port
from mirror.service import runner as runner_module
from mirror.service.metrics import Metrics
from mirror.service.runner import JobRunner
from mirror.service.store import (
    DISCOVERY,
    FAILED,
    PRUNE_BATCH,
    PRUNE_BATCHES,
    QUEUED,
    RUNNING,
    SUCCEEDED,
    WAITING,
    JobStore,
    deliveries,
    jobs,
)
from mirror.settings import load_settings
from tests.support import write_config
from tests.test_service import Service, service_config
from tests.test_store import FakeClock
from tests.test_sync import VERSION

DAY = 86400.0
KEEP_DAYS, KEEP_JOBS = 30.0, 1000  # the settings' defaults


async def finished(
    store: JobStore, clock: FakeClock, versions: list[str] | None, state: str = SUCCEEDED, *delivered: str
) -> str:
    """A job for `versions` run to `state`, one second after the last, answering each delivery in `delivered`;
    its id."""
    clock.advance(1)
    job_ids = {(await store.enqueue("ci", versions, delivery))[0]["id"] for delivery in delivered or (None,)}
    (job_id,) = job_ids  # the deliveries merged into one queued job
    claimed = await store.claim_next("runner", 60)
    assert claimed is not None and claimed["id"] == job_id
    assert await store.finish(job_id, "runner", state, [], None if state == SUCCEEDED else "it broke")
    return str(job_id)


async def states(store: JobStore) -> dict[str, str]:
    return {job["id"]: job["state"] for job in await store.recent(10_000)}


def noted_deliveries(store: JobStore) -> dict[str, str]:
    with store.engine.connect() as db:
        return {row.delivery: row.job_id for row in db.execute(select(deliveries))}


async def test_old_finished_jobs_go_with_their_deliveries(store: JobStore, clock: FakeClock) -> None:
    """Past keep_jobs_days, failures and replaced successes go, and the deliveries they answered; a job waiting,
    queued or running stays however old, and so does each release's newest success."""
    replaced = await finished(store, clock, ["v2.9.0"], SUCCEEDED, "d-old", "d-merged")  # two deliveries, one job
    newest = await finished(store, clock, ["v2.9.0"], SUCCEEDED, "d-newest")
    failed = await finished(store, clock, ["v2.10.0"], FAILED, "d-failed")
    only = await finished(store, clock, ["v2.11.0"], SUCCEEDED)  # the one success of its release, however old
    discovery = await finished(store, clock, None, SUCCEEDED, "schedule:a")
    discovery_failed = await finished(store, clock, None, FAILED, "schedule:b")
    late, _ = await store.enqueue("ci", ["v2.14.0"], "d-late")  # to fail long after it started
    assert (await store.claim_next("late", 100 * DAY) or {})["id"] == late["id"]
    running, _ = await store.enqueue("ci", ["v2.12.0"], "d-running")
    assert (await store.claim_next("slow", 100 * DAY) or {})["id"] == running["id"]
    waiting, _ = await store.enqueue("ci", ["v2.12.0"], "d-waiting")  # its follow-up
    queued, _ = await store.enqueue("ci", ["v2.13.0"], "d-queued")
    newest_success = await store.last_success()
    clock.advance(KEEP_DAYS * DAY + 1)
    assert await store.finish(late["id"], "late", FAILED, [], "it broke")  # created long ago, finished now

    assert await store.prune(KEEP_DAYS, KEEP_JOBS) == 3
    kept = {
        newest: SUCCEEDED,
        only: SUCCEEDED,
        discovery: SUCCEEDED,
        running["id"]: RUNNING,
        waiting["id"]: WAITING,
        queued["id"]: QUEUED,
        late["id"]: FAILED,
    }
    assert await states(store) == kept
    assert not {replaced, failed, discovery_failed} & set(noted_deliveries(store).values())
    assert set(noted_deliveries(store)) == {
        "d-newest",
        "schedule:a",
        "d-running",
        "d-waiting",
        "d-queued",
        "d-late",
    }
    assert await store.last_success() == newest_success  # the metric and its alert read the same
    assert await store.prune(KEEP_DAYS, KEEP_JOBS) == 0
    # a replayed webhook within its window is still answered by the release's newest success (`_taking_job`)
    again, created = await store.enqueue("ci", ["v2.9.0"], "d-replayed", done_within=KEEP_DAYS * DAY + 10)
    assert again["id"] == newest and not created
    # a delivery whose job is gone asks afresh
    _, created = await store.enqueue("ci", ["v2.10.0"], "d-failed")
    assert created


async def test_only_the_newest_jobs_are_kept(store: JobStore, clock: FakeClock) -> None:
    """Past keep_jobs jobs (newest first, as the job list shows them), the older finished ones go, whatever
    their age; a running job and a release's one success stay."""
    running, _ = await store.enqueue("ci", ["v2.12.0"], None)
    assert await store.claim_next("slow", 100 * DAY) is not None
    only = await finished(store, clock, ["v2.11.0"], SUCCEEDED)
    ticks = [await finished(store, clock, None, (SUCCEEDED, FAILED)[i % 2]) for i in range(14)]
    assert await store.prune(KEEP_DAYS, 10) == 4  # 16 jobs: the 6 oldest are beyond the count, 4 of them go
    assert set(await states(store)) == {running["id"], only, *ticks[4:]}
    assert await store.prune(KEEP_DAYS, 10) == 0


def add_finished_jobs(store: JobStore, count: int, finished_at: float) -> None:
    """`count` failed discovery jobs that finished at `finished_at`, each answering a delivery: a big table
    of old jobs, written at once."""
    rows = [
        {
            "id": uuid.uuid4().hex,
            "kind": "schedule",
            "release_key": DISCOVERY,
            "state": FAILED,
            "created_at": finished_at - 60,
            "finished_at": finished_at,
            "attempts": 1,
        }
        for _ in range(count)
    ]
    with store.engine.begin() as db:
        db.execute(insert(jobs), rows)
        db.execute(insert(deliveries), [{"delivery": f"d-{row['id']}", "job_id": row["id"]} for row in rows])


def jobs_in(store: JobStore) -> int:
    with store.engine.connect() as db:
        return int(db.execute(select(func.count()).select_from(jobs)).scalar_one())


async def test_a_big_table_is_pruned_in_bounded_transactions(store: JobStore, clock: FakeClock) -> None:
    add_finished_jobs(store, 2 * PRUNE_BATCH + 7, clock.now - 40 * DAY)
    commits: list[int] = []
    event.listen(store.engine, "commit", lambda connection: commits.append(1))
    assert await store.prune(KEEP_DAYS, KEEP_JOBS, batch=100, batches=3) == 300  # what is left goes at the next
    assert len(commits) == 3 + 1 and jobs_in(store) == 2 * PRUNE_BATCH + 7 - 300  # and the old files', one more
    commits.clear()
    assert await store.prune(KEEP_DAYS, KEEP_JOBS) == 2 * PRUNE_BATCH + 7 - 300
    assert len(commits) == 2 + 1  # 500 and 207 jobs: each batch a transaction of its own; then the files'
    assert jobs_in(store) == 0 and noted_deliveries(store) == {}


def meet_mid_transaction(replicas: list[JobStore]) -> None:
    """Each replica's first pruning transaction waits, its jobs chosen and locked, until every replica's has
    chosen its own: they overlap for certain."""
    everyone = threading.Barrier(len(replicas), timeout=30)
    for replica in replicas:
        met: list[bool] = []

        def meet(*args: Any, met: list[bool] = met) -> None:
            if str(args[2]).startswith("DELETE FROM deliveries") and not met:
                met.append(True)
                everyone.wait()

        event.listen(replica.engine, "before_cursor_execute", meet)


async def test_replicas_pruning_at_once_delete_each_job_once(database_url: str, clock: FakeClock) -> None:
    replicas = [JobStore(database_url, clock=clock) for _ in range(3)]
    try:
        store = replicas[0]
        kept = [await finished(store, clock, [f"v2.{minor}.0"], SUCCEEDED) for minor in range(10, 13)]
        add_finished_jobs(store, 1500, clock.now - 40 * DAY)
        meet_mid_transaction(replicas)  # none waits for another's locks: each skips the jobs the others hold
        deleted = await asyncio.gather(*(r.prune(KEEP_DAYS, KEEP_JOBS, batch=50, batches=100) for r in replicas))
        assert sum(deleted) == 1500 and all(deleted)  # each did a share; none failed, none deleted a job twice
        assert set(await states(store)) == set(kept) and noted_deliveries(store) == {}
    finally:
        for replica in replicas:
            replica.close()


class PruneFailsFirst(JobStore):
    """A store whose first prune fails, as a database error would."""

    calls = 0

    async def prune(
        self, keep_days: float, keep_jobs: int, batch: int = PRUNE_BATCH, batches: int = PRUNE_BATCHES
    ) -> int:
        self.calls += 1
        if self.calls == 1:
            raise RuntimeError("the prune broke")
        return await super().prune(keep_days, keep_jobs, batch, batches)


async def run_jobs(runner: JobRunner, store: PruneFailsFirst, versions: list[str], prunes: int) -> list[str]:
    """The jobs run to their record, and `prunes` prunes done by then; each job's state."""
    ids = [(await store.enqueue("ci", [version], None))[0]["id"] for version in versions]
    deadline = time.monotonic() + 120
    while store.calls < prunes or None in [(await store.get(i) or {}).get("finished_at") for i in ids]:
        assert time.monotonic() < deadline and runner.running, "the jobs were not run, or not pruned after"
        await asyncio.sleep(0.1)
    return [(await store.get(i) or {})["state"] for i in ids]


async def test_the_runner_prunes_after_its_jobs_and_a_failing_prune_stops_nothing(
    tmp_path: Path,
    source: LocalRegistry,
    target: LocalRegistry,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings = load_settings(write_config(tmp_path / "mirror.yaml", source, [target]))  # no release at the source
    clock = FakeClock(time.time() - 40 * DAY)
    store = PruneFailsFirst(f"sqlite:///{tmp_path / 'jobs.db'}", clock=clock)
    old = [await finished(store, clock, None, FAILED) for _ in range(2)]
    clock.now = time.time()
    runner = JobRunner(settings, store, Metrics())
    monkeypatch.setattr(runner_module, "PRUNE_EVERY", 0.0)  # after every job
    runner.start()
    try:
        assert await run_jobs(runner, store, [VERSION, "v2.11.0"], prunes=2) == [FAILED, FAILED]
        assert store.calls == 2 and not set(old) & set(await states(store))  # the second prune deleted them
        monkeypatch.setattr(runner_module, "PRUNE_EVERY", 600.0)
        assert await run_jobs(runner, store, ["v2.12.0"], prunes=2) == [FAILED]
        await runner.stop(1)  # done with the job, and whatever follows it
        assert store.calls == 2  # at most once per PRUNE_EVERY
    finally:
        await runner.stop(1)
        store.close()
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "old jobs" in r.getMessage()]
    assert warned == ["could not delete old jobs: RuntimeError: the prune broke"]


READ_ONLY_THEN = """
import asyncio, json, subprocess, sys
from mirror import database
from mirror.service.store import JobStore

state = sys.argv[1]
store = JobStore(f"sqlite:///{state}/jobs.db")
job, _ = asyncio.run(store.enqueue("ci", ["v2.10.0"], None))
seen = {"before": asyncio.run(store.writable())}
store.engine.dispose()  # no file held open for writing: the mount may go read-only
subprocess.run(["mount", "-o", "remount,ro,bind", state], check=True)
seen["after"] = asyncio.run(store.writable())
seen["read"] = asyncio.run(store.get(job["id"]))["id"] == job["id"]
try:
    asyncio.run(store.enqueue("ci", ["v2.11.0"], None))
except Exception as exc:
    seen["write"] = str(exc).splitlines()[0]
    seen["for_now"] = database.unavailable(exc)
print(json.dumps(seen))
"""


def test_writable_is_false_on_a_read_only_file_system(tmp_path: Path) -> None:
    """The state directory remounted read-only (as a volume is after an I/O error): reads go on, writes fail,
    and writable() says so (a SELECT alone did not); a write there is the store away for now (a webhook's 503
    with Retry-After, as for a read-only PostgreSQL), not a refused statement (500)."""
    state = tmp_path / "state"
    state.mkdir()
    bind_then_run = 'mount --bind "$0" "$0" && exec "$@"'
    command = ["unshare", "--mount", "sh", "-c", bind_then_run, str(state), sys.executable, "-c", READ_ONLY_THEN]
    done = subprocess.run([*command, str(state)], capture_output=True, text=True, timeout=60, cwd=Path.cwd())
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["before"] is True and seen["after"] is False and seen["read"] is True
    assert "readonly database" in seen["write"] and seen["for_now"] is True


async def test_writable_is_false_on_a_read_only_postgresql(database_url: str) -> None:
    """A database that takes no writes (a standby after a failover, default_transaction_read_only)."""
    store = JobStore(database_url)
    server, name = database_url.rsplit("/", 1)
    admin = create_engine(f"{server}/postgres", isolation_level="AUTOCOMMIT")  # a session the setting spares
    try:
        job, _ = await store.enqueue("ci", ["v2.10.0"], None)
        assert await store.writable()
        for setting, expected in (("on", False), ("off", True)):
            with admin.connect() as db:
                db.execute(text(f"ALTER DATABASE {name} SET default_transaction_read_only = {setting}"))
            store.engine.dispose()  # new sessions read the database's setting
            assert await store.writable() is expected
            assert (await store.get(job["id"]) or {})["id"] == job["id"]
            if not expected:  # a write there (25006): the store away for now, a webhook's 503, not a 500
                with pytest.raises(DBAPIError) as raised:
                    await store.enqueue("ci", ["v2.11.0"], None)
                assert getattr(raised.value.orig, "sqlstate", None) == "25006"
                assert database.unavailable(raised.value)
    finally:
        store.close()
        admin.dispose()


@pytest.mark.parametrize("pooled", [True, False], ids=["the job store's pool", "a target lock's session"])
def test_a_postgresql_session_carries_keepalives_so_a_silent_server_is_found_dead(
    database_url: str, pooled: bool
) -> None:
    """A claim or a lease's renewal in flight when the server went silent (a failover, a partition) fails within
    about 30 s, as a target lock's check does, rather than after the kernel's retransmissions (15 minutes), with
    the lease lost meanwhile. Read from libpq's own view of the connection it opened."""
    engine = database.open_engine(database_url, pooled=pooled)
    try:
        connection = engine.raw_connection()
        try:
            parameters = connection.driver_connection.info.get_parameters()  # type: ignore[union-attr]
        finally:
            connection.close()
    finally:
        engine.dispose()
    for name, value in database.SESSION_KEEPALIVES.items():
        assert parameters.get(name) == str(value), (name, parameters)


@pytest.mark.parametrize("pooled", [True, False], ids=["the job store's pool", "a target lock's session"])
def test_the_server_keeps_a_session_whose_client_vanished_for_seconds_not_hours(
    database_url: str, pooled: bool
) -> None:
    """A pod whose node lost power sends no FIN: the server kept its session, and the target lock it held, for
    its default 7200 s of keepalive idle, every run for that target waiting out lock_timeout and failing. Read
    from the server's own settings of the session."""
    engine = database.open_engine(database_url, pooled=pooled)
    try:
        with engine.connect() as connection:
            names = list(database.SERVER_KEEPALIVES)
            shown = {name: connection.execute(text(f"SHOW {name}")).scalar() for name in names}
            connection.commit()
    finally:
        engine.dispose()
    assert shown == database.SERVER_KEEPALIVES  # the socket's own settings, as the server's show hooks read them
    assert shown["tcp_keepalives_idle"] == "10"


async def test_postgresql_disk_full_is_the_store_away_for_now(database_url: str) -> None:
    """SQLSTATE 53100 (disk_full), raised by the real server where a write needs space: a webhook is answered as
    when the database is down (503, Retry-After), not 500; writable() is false."""
    store = JobStore(database_url)
    try:
        with store.engine.begin() as db:
            db.execute(
                text(
                    "CREATE FUNCTION no_space() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION"
                    " 'could not extend file: No space left on device' USING ERRCODE = 'disk_full'; END $$"
                )
            )
            for table in ("jobs", "write_check"):
                trigger = f"CREATE TRIGGER no_space BEFORE INSERT OR UPDATE ON {table} EXECUTE FUNCTION no_space()"
                db.execute(text(trigger))
        with pytest.raises(DBAPIError) as raised:
            await store.enqueue("ci", ["v2.10.0"], "delivery-1")
        assert getattr(raised.value.orig, "sqlstate", None) == "53100"
        assert database.unavailable(raised.value)
        assert not await store.writable()
    finally:
        store.close()


class OnASmallDisk(Service):
    """`mirror serve` whose state_dir is a small tmpfs of its own (a private mount namespace): the PVC the
    SQLite store shares with caches and output, which the test fills through /proc/<pid>/root."""

    def __init__(self, config: Path, port: int, state: Path) -> None:
        super().__init__(config, port)
        self.state = state

    def command(self) -> list[str]:
        """`mirror serve` with its state directory on a 4 MB tmpfs mounted in a mount namespace of its own."""
        mount_then_run = 'mount -t tmpfs -o size=4m tmpfs "$0" && exec "$@"'
        return ["unshare", "--mount", "sh", "-c", mount_then_run, str(self.state), *super().command()]

    @property
    def disk(self) -> Path:
        """The state directory as the service sees it."""
        assert self.process is not None
        return Path(f"/proc/{self.process.pid}/root") / self.state.relative_to("/")


@pytest.fixture
def small_disk_service(tmp_path: Path, source: LocalRegistry, target: LocalRegistry) -> Iterator[OnASmallDisk]:
    config = service_config(tmp_path, source, target)
    (tmp_path / "state").mkdir()
    running = OnASmallDisk(config, free_port(), tmp_path / "state")
    running.start()
    yield running
    running.stop()


def fill(disk: Path) -> Path:
    """Another writer takes every byte left on `disk`; the file it wrote."""
    filler = disk / "other-writer"
    with filler.open("wb", buffering=0) as out, contextlib.suppress(OSError):  # full
        while True:
            out.write(bytes(65536))
    return filler


def test_a_full_disk_is_unready_and_webhooks_are_told_to_come_back(small_disk_service: OnASmallDisk) -> None:
    service = small_disk_service
    assert (service.disk / "mirror.db").exists() and not (service.state / "mirror.db").exists()  # on its tmpfs
    filler = fill(service.disk)
    ready = httpx.get(f"{service.url}/readyz", timeout=10)
    assert ready.status_code == 503 and ready.json()["store"] is False
    refused = service.signed({"version": "2.10.0"}, delivery="delivery-1")
    assert refused.status_code == 503 and refused.headers["Retry-After"] == "30", refused.text
    assert "database or disk is full" in service.log.read_text()
    filler.unlink()  # space made: the same delivery, sent again, is taken
    assert httpx.get(f"{service.url}/readyz", timeout=10).status_code == 200
    accepted = service.signed({"version": "2.10.0"}, delivery="delivery-1")
    assert accepted.status_code == 202, accepted.text
