"""The durable job queue: one table in SQLAlchemy Core, shared by every replica of `mirror serve`.

SQLite (the default, under `state_dir`) serves one replica. PostgreSQL serves several: a job is written
before the webhook is answered, claimed atomically (`FOR UPDATE SKIP LOCKED`; a conditional update
elsewhere), and held under a lease that its runner renews. A job whose lease expired (its replica died), or
that an older mirror without leases left running, is claimed again by whoever looks next; a live replica's
job is never taken, and a job whose lease ran out `max_attempts` times (it kills its replica each time) is
failed by the claim that finds it, in the same transaction, instead of being run again.

Per release, at most one job is queued or running, and at most one waiting, each enforced by a partial unique
index, not by a read-then-write. A webhook for a release joins its queued job; while its job runs, it joins or
creates the release's one follow-up job, `waiting` (Docker Hub sends a push per image, minutes apart: the running
job may have looked before the later images existed). The transaction that ends the running job (finished, given
back, given up) makes the follow-up queued; a claim first queues any follow-up whose release has no job queued or
running (an older replica, which never reads `waiting`, ended it). Older replicas keep working during a rollout:
the index they create is the one kept, and they claim only queued jobs. A delivery id answers its job for good, unless
that job failed: GitHub's "Redeliver" sends the same id again, the way to recover, so it queues a new job. The
webhooks' new jobs are bounded (`max_queued`): past it, nothing is queued.

Time comes from one clock, read once per transaction: the one given (the tests move a fake one), else
PostgreSQL's own (`clock_timestamp()`), so replicas with skewed clocks agree on when a lease ends; SQLite
serves one replica on one machine, whose clock (`time.time`) is the database's.

Finished jobs are kept `service.keep_jobs_days` days, and no further back than the newest `service.keep_jobs` jobs:
`prune` (the runner calls it after a job, every ten minutes at most) deletes older ones with their deliveries, in
transactions of at most PRUNE_BATCH jobs along the indexes, never a job still to run nor a release's newest success
(`last_success`; a replayed webhook's answer). Replicas pruning at once skip each other's locked jobs on PostgreSQL.
`writable` writes one row, so a read-only or full store is unready.

Every string a job carries is bounded: the columns' lengths are checked by the service before a delivery id
reaches `enqueue`, and a job's error is cut to `MAX_ERROR_CHARS` here, at write, so nothing longer is stored.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

from sqlalchemy import (
    Column,
    Float,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    and_,
    delete,
    func,
    insert,
    inspect,
    or_,
    select,
    text,
    update,
)
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import IntegrityError
from sqlalchemy.sql.elements import ColumnElement

from mirror import database
from mirror.untrusted import clip

T = TypeVar("T")
WAITING, QUEUED, RUNNING, SUCCEEDED, FAILED = "waiting", "queued", "running", "succeeded", "failed"
ACTIVE = (QUEUED, RUNNING)  # at most one per release (the index older versions also create)
UNFINISHED = (WAITING, QUEUED, RUNNING)
ANSWERING = (WAITING, QUEUED, RUNNING, SUCCEEDED)  # a delivery's job still answers it; a failed one is redelivered
# A scheduled tick's delivery (`schedule:<fire time>`) is answered by its job even when that failed: another
# replica late to the same tick (a skewed clock, a store outage waited out) would run it again; the next tick does.
TICK_DELIVERY = "schedule:"
STATES = (WAITING, QUEUED, RUNNING, SUCCEEDED, FAILED)
KINDS = ("ci", "dockerhub", "schedule")
DISCOVERY = "discover"  # the release key of a discovery job
ENQUEUE_ATTEMPTS = 5
MAX_DELIVERY_CHARS = 200  # the delivery columns' length
# The most deliveries a job keeps: a signed body sent again under new delivery ids (GitHub's signature does not
# cover the id) would add a row each, and a release's newest success is never pruned. Past it a delivery is still
# answered by the job, only not noted: sent again after the job ended, it is a new request.
MAX_DELIVERIES_PER_JOB = 100
MAX_ERROR_CHARS = 500  # a job's error as stored (and so as served and logged)
SHUTTING_DOWN = "by a replica shutting down"  # why a job is given back, as its record says
LOST_LOCK = "by the loss of its target lock"
LOCK_WAIT = "by its wait for a target lock past lock_timeout"
LOCKS_AWAY = "by a lock database out of reach"
MAX_ATTEMPTS = 3  # service.max_attempts's default
PRUNE_BATCH = 500  # the most jobs one pruning transaction deletes: a first prune of a big table holds no lock long
PRUNE_BATCHES = 20  # transactions per prune; what is left over goes at the next
DAY = 86400.0
Clock = Callable[[], float]  # seconds since the epoch

metadata = MetaData()
jobs = Table(
    "jobs",
    metadata,
    Column("id", String(32), primary_key=True),
    Column("kind", String(16), nullable=False),  # ci | dockerhub | schedule
    Column("versions", Text),  # JSON list; NULL means "discover"
    Column("release_key", String(200), nullable=False),  # the versions as JSON, or "discover"
    Column("delivery", String(200), unique=True),
    Column("state", String(16), nullable=False, index=True),
    Column("created_at", Float, nullable=False),
    Column("started_at", Float),
    Column("finished_at", Float),
    Column("owner", String(100)),  # the replica holding the lease
    Column("lease_expires_at", Float),
    # how many times it was claimed and not given back (a replica shutting down gives its claim back)
    Column("attempts", Integer, nullable=False, server_default="0"),
    Column("result", Text),  # JSON: the releases' reports
    Column("error", Text),
)
# Every delivery a job answers: the one that created it, and those merged into it while it was queued (or that a
# recent success answered), so a resent delivery finds its job after that job finished; one whose job failed is
# moved to the job it queues when it is sent again.
deliveries = Table(
    "deliveries",
    metadata,
    Column("delivery", String(200), primary_key=True),
    Column("job_id", String(32), nullable=False),
)
Index("deliveries_by_job", deliveries.c.job_id)  # a pruned job's deliveries, deleted with it
# The files a job wrote beside its values (the RBAC file, a chart's .tgz where the target refuses charts), by their
# sha256: the job's record names them, any replica serves them. Each job that writes one again marks it kept then;
# the prune deletes those no job marked for `keep_jobs_days`.
files = Table(
    "files",
    metadata,
    Column("sha256", String(64), primary_key=True),
    Column("content", LargeBinary, nullable=False),
    Column("kept_at", Float, nullable=False, index=True),
)
# Releases owed an announcement to the on-call channel (`mirror.notify.ledger`): one row per release and target
# whose images a run copied and whose values it did not write, so the pod that writes them announces the release
# whatever pod copied it; a row no job noted for `keep_jobs_days` goes with the prune.
owed = Table(
    "owed_announcements",
    metadata,
    Column("key", String(400), primary_key=True),
    Column("noted_at", Float, nullable=False, index=True),
)
# One row, written by `writable`: a store that takes no writes (a read-only file or standby, a full disk) says so
write_check = Table(
    "write_check",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("checked_at", Float, nullable=False),
)
_waiting, _queued, _running = jobs.c.state == WAITING, jobs.c.state == QUEUED, jobs.c.state == RUNNING
_active = jobs.c.state.in_(ACTIVE)
# The older versions' index, kept as it was (they create it when missing): a follow-up waits outside it
Index("jobs_one_active_per_release", jobs.c.release_key, unique=True, sqlite_where=_active, postgresql_where=_active)
Index("jobs_one_waiting_per_release", jobs.c.release_key, unique=True, sqlite_where=_waiting, postgresql_where=_waiting)
Index("jobs_newest_first", jobs.c.created_at, jobs.c.id)  # the job list's order and its cursor
Index("jobs_finished_by_state", jobs.c.state, jobs.c.finished_at)  # the newest success, one index look-up
# a release's newer success, which the prune asks of each candidate: without it, each look scanned every success
Index("jobs_by_release_state_finished", jobs.c.release_key, jobs.c.state, jobs.c.finished_at)
# Indexes of an unreleased version, dropped on open: a queued follow-up broke older replicas during a rollout
# (their claim took it while its release ran; their index could not be made again)
RETIRED_INDEXES = ("jobs_one_queued_per_release", "jobs_one_running_per_release")


class UnknownJob(LookupError):
    """A job id (the job list's cursor) that names no job."""


class QueueFull(Exception):
    """A new job was asked for while the most jobs allowed were queued: nothing was queued."""

    def __init__(self, queued: int, limit: int) -> None:
        super().__init__(f"{queued} jobs are queued, the most allowed (service.max_queued_jobs is {limit})")
        self.queued, self.limit = queued, limit


class _Raced(Exception):
    """Another replica's job took the delivery between our look and our write: the attempt is rolled back."""


@dataclasses.dataclass(frozen=True)
class _Ask:
    """What `enqueue` was asked for."""

    kind: str
    versions: list[str] | None
    delivery: str | None
    done_within: float
    max_queued: int | None

    @property
    def key(self) -> str:
        return release_key(self.versions)


def release_key(versions: list[str] | None) -> str:
    return json.dumps(versions) if versions is not None else DISCOVERY


def _row(row: Any) -> dict[str, Any]:
    job = dict(row._mapping)
    job["versions"] = json.loads(job["versions"]) if job["versions"] else None
    job["result"] = json.loads(job["result"]) if job["result"] else None
    return job


def new_owner_id() -> str:
    """A replica's name in the lease column: host, process and a random part (pids repeat across pods)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class JobStore:
    def __init__(self, url: str, clock: Clock | None = None) -> None:
        """`clock`: where every time the store writes or compares comes from (created_at, started_at,
        finished_at, leases and their expiry); by default PostgreSQL's clock, or this machine's for SQLite."""
        self.engine: Engine = database.open_engine(url)
        self.postgres = self.engine.dialect.name == "postgresql"
        self.clock = clock if clock is not None or self.postgres else time.time
        _create_or_upgrade(self.engine)
        # SQLite takes one writer at a time; PostgreSQL needs no lock in the process
        self._lock: threading.Lock | None = None if self.postgres else threading.Lock()

    def _now(self, db: Connection) -> float:
        """The time, from the store's clock: read once per transaction, so what one transaction compares
        and writes agrees to the microsecond."""
        if self.clock is not None:
            return self.clock()
        return float(db.execute(select(func.extract("epoch", func.clock_timestamp()))).scalar_one())

    async def _run(self, work: Callable[[Connection], T]) -> T:
        def in_transaction() -> T:
            if self._lock is None:
                with self.engine.begin() as connection:
                    return work(connection)
            with self._lock, self.engine.begin() as connection:
                return work(connection)

        return await asyncio.to_thread(in_transaction)

    async def enqueue(
        self,
        kind: str,
        versions: list[str] | None,
        delivery: str | None,
        done_within: float = 0.0,
        max_queued: int | None = None,
    ) -> tuple[dict[str, Any], bool]:
        """The new job, or the one already there for this delivery or this release; and whether it is new.
        A delivery answers its job unless that job failed (GitHub's redelivery keeps the id): then it is taken
        as new. The release's queued job takes the delivery; its running job does not: its waiting follow-up does
        (made if there is none).
        The database's unique constraints decide, so two replicas taking the same delivery make one job.
        With `done_within`, a release whose job succeeded less than that many seconds ago, and none running, is
        answered by that job (a replayed webhook queues nothing). With `max_queued`, a new job is refused with
        QueueFull while that many jobs are queued or waiting."""
        if delivery is not None and len(delivery) > MAX_DELIVERY_CHARS:
            raise ValueError(f"delivery id of {len(delivery)} characters: at most {MAX_DELIVERY_CHARS}")
        ask = _Ask(kind, versions, delivery, done_within, max_queued)
        for _ in range(ENQUEUE_ATTEMPTS):
            try:
                row, created = await self._run(lambda db: _enqueue_once(db, ask, self._now(db)))
            except (IntegrityError, _Raced):
                continue  # another replica queued this release or took this delivery meanwhile: look again
            return _row(row), created
        raise RuntimeError(f"could not queue a job for {ask.key} after {ENQUEUE_ATTEMPTS} attempts")

    async def tick_missed(self, delivery: str) -> bool:
        """Whether a scheduled tick was missed: no job answers `delivery` (in any state), though the schedule ran
        before (a store without a scheduled job, a first install or a new database, has missed none)."""
        return await self._run(lambda db: _tick_missed(db, delivery))

    async def last_success(self) -> float | None:
        """When the newest succeeded job finished (None: none has): one index look-up, whatever the table's size.
        Every replica reads the same answer, so a replica that restarted still knows it."""
        succeeded = (jobs.c.state == SUCCEEDED) & jobs.c.finished_at.is_not(None)
        newest = select(jobs.c.finished_at).where(succeeded).order_by(jobs.c.finished_at.desc()).limit(1)
        found = await self._run(lambda db: db.execute(newest).scalar())
        return float(found) if found is not None else None

    async def file(self, sha256: str) -> bytes | None:
        """A file a job wrote beside its values, by its sha256; None once pruned."""
        found = await self._run(lambda db: db.execute(select(files.c.content).where(files.c.sha256 == sha256)).first())
        return bytes(found.content) if found is not None else None

    async def owe(self, keys: set[str]) -> None:
        """Releases owed an announcement (`mirror.notify.ledger`)."""
        rows = [{"key": each} for each in keys]
        await self._run(lambda db: _touch(db, owed.c.key, owed.c.noted_at, rows, self._now(db)))

    async def settle(self, keys: set[str]) -> set[str]:
        """Of `keys`, those that were owed, deleted: two replicas settling at once get each key once."""
        settling = delete(owed).where(owed.c.key.in_(sorted(keys))).returning(owed.c.key)
        return await self._run(lambda db: set(db.execute(settling).scalars())) if keys else set()

    async def get(self, job_id: str) -> dict[str, Any] | None:
        row = await self._run(lambda db: db.execute(select(jobs).where(jobs.c.id == job_id)).first())
        return _row(row) if row is not None else None

    async def recent(self, limit: int = 50) -> list[dict[str, Any]]:
        jobs_page, _ = await self.page(limit)
        return jobs_page

    async def page(
        self, limit: int, before: str | None = None, state: str | None = None, kind: str | None = None
    ) -> tuple[list[dict[str, Any]], str | None]:
        """Up to `limit` jobs, newest first, older than the job `before` (the cursor), of that state and kind;
        and the cursor of the next page (None on the last). Raises UnknownJob for a cursor that names no job."""

        rows = await self._run(lambda db: _newest_first(db, limit + 1, before, state, kind))
        found = [_row(r) for r in rows[:limit]]
        return found, found[-1]["id"] if len(rows) > limit else None

    async def claim_next(
        self,
        owner: str,
        lease: float,
        max_attempts: int = MAX_ATTEMPTS,
        on_give_up: Callable[[dict[str, Any]], None] | None = None,
    ) -> dict[str, Any] | None:
        """The oldest job that is queued or whose lease expired, now running under `owner`'s lease. A job
        whose lease expired after `max_attempts` claims is failed on the way instead (each told to
        `on_give_up` once the transaction is committed; its follow-up queued), and the next one looked at.
        First, follow-ups whose release has no job queued or running are queued (an older replica ended it)."""
        with contextlib.suppress(IntegrityError):  # a job of such a release was queued meanwhile: it waits on
            await self._run(_promote_orphans)

        def work(db: Connection) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
            now = self._now(db)
            given_up = []
            while (candidate := _oldest_claimable(db, now)) is not None:
                if candidate.state == RUNNING and candidate.attempts >= max_attempts:
                    failed = _give_up(db, candidate, now)
                    if failed is not None:
                        _promote(db, failed.release_key)
                        given_up.append(_row(failed))
                    continue
                claim = (
                    update(jobs)
                    .where(jobs.c.id == candidate.id, _claimable(now))
                    .values(
                        state=RUNNING,
                        owner=owner,
                        lease_expires_at=now + lease,
                        started_at=now,
                        attempts=jobs.c.attempts + 1,
                    )
                    .returning(jobs)
                )
                row = db.execute(claim).first()
                if row is not None:
                    return _row(row), given_up
                # SQLite only (PostgreSQL holds the row locked): another process took it between our two
                # statements; look again
            return None, given_up

        claimed, given_up = await self._run(work)
        for job in given_up:
            if on_give_up is not None:
                on_give_up(job)
        return claimed

    async def renew(self, job_id: str, owner: str, lease: float) -> bool:
        """Extend the lease; False when `owner` no longer holds it (it expired and another replica took it)."""

        def work(db: Connection) -> bool:
            renewed = update(jobs).where(_held(job_id, owner)).values(lease_expires_at=self._now(db) + lease)
            return bool(db.execute(renewed).rowcount)

        return await self._run(work)

    async def finish(
        self,
        job_id: str,
        owner: str,
        state: str,
        result: Any,
        error: str | None,
        written: dict[str, bytes] | None = None,
    ) -> bool:
        """Record the outcome with the files the job wrote beside its values (`written`, by sha256), and queue the
        release's follow-up job; False (nothing written) when `owner` lost the lease meanwhile."""
        values = {
            "state": state,
            "result": json.dumps(result),
            "error": stored_error(error) if error is not None else None,
        }

        def work(db: Connection) -> bool:
            statement = update(jobs).where(_held(job_id, owner)).values(**values, finished_at=self._now(db))
            ended = db.execute(statement.returning(jobs.c.release_key)).first()
            if ended is not None:
                kept = [{"sha256": digest, "content": content} for digest, content in (written or {}).items()]
                _touch(db, files.c.sha256, files.c.kept_at, kept, self._now(db))
                _promote(db, ended.release_key)
            return ended is not None

        return await self._run(work)

    async def release(self, job_id: str, owner: str, why: str = SHUTTING_DOWN, refund: bool = True) -> str | None:
        """Give an unfinished job back to the queue (a replica shutting down, a lost target lock), for a replica to
        take; with `refund` its claim is given back too, so shutdowns never count towards `max_attempts`. Where a
        follow-up job of its release waits, that one is queued to run the release in its place and this one ends
        failed, saying `why`. The state it was left in; None (nothing written) when `owner` does not hold it."""

        def work(db: Connection) -> str | None:
            held = db.execute(select(jobs.c.release_key).where(_held(job_id, owner))).first()
            if held is None:
                return None
            follow_up = db.execute(select(jobs.c.id).where(jobs.c.release_key == held.release_key, _waiting)).first()
            values: dict[str, Any]
            if follow_up is None:
                attempts = jobs.c.attempts - 1 if refund else jobs.c.attempts
                values = {"state": QUEUED, "owner": None, "lease_expires_at": None, "attempts": attempts}
                values["started_at"] = None  # it waits again: the status page would say "running for" the wait
            else:
                error = f"cut short {why}; job {follow_up.id}, queued after it, runs its release"
                values = {"state": FAILED, "finished_at": self._now(db), "error": error}
            released = db.execute(update(jobs).where(_held(job_id, owner)).values(**values))
            if not released.rowcount:
                return None
            if follow_up is not None:
                _promote(db, held.release_key)
            return str(values["state"])

        for _ in range(ENQUEUE_ATTEMPTS):
            try:
                return await self._run(work)
            except IntegrityError:  # a job of its release was queued between the look and the write: look again
                continue
        raise RuntimeError(f"could not give job {job_id} back after {ENQUEUE_ATTEMPTS} attempts")

    async def writable(self) -> bool:
        """Whether the store takes a write now: the jobs read and `write_check`'s one row written (never a new
        row), which a read-only file, a read-only PostgreSQL (a standby) or a full disk refuses."""
        try:
            await self._run(lambda db: _check_write(db, self._now(db)))
        except Exception:
            return False
        return True

    async def prune(
        self, keep_days: float, keep_jobs: int, batch: int = PRUNE_BATCH, batches: int = PRUNE_BATCHES
    ) -> int:
        """Delete finished jobs, with their deliveries, that finished over `keep_days` days ago or that are
        older than the newest `keep_jobs` jobs; never a waiting, queued or running job, nor the newest success
        of a release (`last_success`, a replayed webhook's answer). At most `batch` jobs per transaction and
        `batches` transactions. Replicas pruning at once delete each job once. Files no job wrote, and ledger
        rows no job noted, for `keep_days` days go too. How many jobs were deleted."""
        deleted = 0
        for _ in range(batches):
            done = await self._run(lambda db: _prune_batch(db, self._now(db) - keep_days * DAY, keep_jobs, batch))
            deleted += done
            if done < batch:
                break
        await self._run(lambda db: _prune_kept(db, self._now(db) - keep_days * DAY))
        return deleted

    def close(self) -> None:
        self.engine.dispose()


def _oldest_claimable(db: Connection, now: float) -> Any:
    """The oldest claimable job's id, state and lease; on PostgreSQL locked for this transaction, jobs another
    replica is claiming at this moment skipped."""
    columns = (jobs.c.id, jobs.c.state, jobs.c.attempts, jobs.c.owner, jobs.c.lease_expires_at)
    oldest = select(*columns).where(_claimable(now)).order_by(jobs.c.created_at, jobs.c.id).limit(1)
    if db.dialect.name == "postgresql":
        oldest = oldest.with_for_update(skip_locked=True)
    return db.execute(oldest).first()


def _newest_first(db: Connection, limit: int, before: str | None, state: str | None, kind: str | None) -> list[Any]:
    query = select(jobs)
    if state is not None:
        query = query.where(jobs.c.state == state)
    if kind is not None:
        query = query.where(jobs.c.kind == kind)
    if before is not None:
        mark = db.execute(select(jobs.c.created_at).where(jobs.c.id == before)).first()
        if mark is None:
            raise UnknownJob(before)
        older = or_(
            jobs.c.created_at < mark.created_at,
            and_(jobs.c.created_at == mark.created_at, jobs.c.id < before),
        )
        query = query.where(older)
    return list(db.execute(query.order_by(jobs.c.created_at.desc(), jobs.c.id.desc()).limit(limit)).all())


def _touch(db: Connection, key: Column[Any], stamp: Column[Any], rows: list[dict[str, Any]], now: float) -> None:
    """Each row inserted with `stamp` set to now, or, where its `key` is there already, only its stamp set (a
    file's bytes are the same by their digest)."""
    upsert = pg_insert if db.dialect.name == "postgresql" else sqlite_insert
    for row in rows:
        statement = upsert(key.table).values({**row, stamp.name: now})
        db.execute(statement.on_conflict_do_update(index_elements=[key], set_={stamp.name: now}))


def _prune_kept(db: Connection, before: float) -> None:
    """The files and the announcements owed that no job wrote or noted since `before`."""
    db.execute(delete(files).where(files.c.kept_at < before))
    db.execute(delete(owed).where(owed.c.noted_at < before))


def stored_error(error: str) -> str:
    """A job's error as written: one line, cut to MAX_ERROR_CHARS, and no NUL (which a registry's message
    may carry and PostgreSQL's text refuses: the outcome could never be recorded)."""
    return clip(error, MAX_ERROR_CHARS).replace("\x00", "\\x00")


def _held(job_id: str, owner: str) -> ColumnElement[bool]:
    return (jobs.c.id == job_id) & (jobs.c.owner == owner) & (jobs.c.state == RUNNING)


def _lease_ran_out(now: float) -> ColumnElement[bool]:
    """A running job's lease is over, or it never had one: an older mirror, whose table had no lease column,
    left it running (the upgrade adds the column empty), and nobody will ever renew it."""
    return (jobs.c.state == RUNNING) & or_(jobs.c.lease_expires_at.is_(None), jobs.c.lease_expires_at < now)


def _claimable(now: float) -> ColumnElement[bool]:
    """Queued (a follow-up waits, never claimed), or running with its lease over."""
    return or_(_queued, _lease_ran_out(now))


def _release_free() -> ColumnElement[bool]:
    """No job of the row's release is queued or running."""
    others = jobs.alias("others")
    taken = select(others.c.id).where(others.c.release_key == jobs.c.release_key, others.c.state.in_(ACTIVE))
    return ~taken.exists()


def _promote(db: Connection, key: str) -> None:
    """The release's waiting follow-up queued, once no job of it is queued or running (in the transaction that
    ended its running job)."""
    db.execute(update(jobs).where(jobs.c.release_key == key, _waiting, _release_free()).values(state=QUEUED))


def _promote_orphans(db: Connection) -> None:
    """Every waiting job whose release has no job queued or running, queued: an older replica, which knows no
    follow-ups, ended the job it waited for."""
    db.execute(update(jobs).where(_waiting, _release_free()).values(state=QUEUED))


def _tick_missed(db: Connection, delivery: str) -> bool:
    if db.execute(select(jobs.c.id).where(jobs.c.kind == "schedule").limit(1)).first() is None:
        return False
    noted = select(deliveries.c.job_id).where(deliveries.c.delivery == delivery)
    answering = noted.union_all(select(jobs.c.id).where(jobs.c.delivery == delivery)).limit(1)
    return db.execute(answering).first() is None


def _check_write(db: Connection, now: float) -> None:
    """The jobs read, and `write_check`'s one row written (made the first time)."""
    db.execute(select(jobs.c.id).limit(1)).all()
    if not db.execute(update(write_check).where(write_check.c.id == 1).values(checked_at=now)).rowcount:
        postgres = db.dialect.name == "postgresql"
        first = (pg_insert if postgres else sqlite_insert)(write_check).values(id=1, checked_at=now)
        db.execute(first.on_conflict_do_nothing())


def _prune_batch(db: Connection, before: float, keep_jobs: int, batch: int) -> int:
    """One pruning transaction: up to `batch` prunable jobs (on PostgreSQL locked, those another replica is
    pruning skipped), and their deliveries, deleted; how many jobs."""
    chosen: dict[str, None] = {}
    for state in (FAILED, SUCCEEDED):  # by age, along jobs_finished_by_state
        aged = (jobs.c.state == state) & (jobs.c.finished_at < before)
        chosen |= dict.fromkeys(_prunable(db, aged, (jobs.c.finished_at, jobs.c.id), batch - len(chosen)))
    if len(chosen) < batch and (beyond := _beyond_the_newest(db, keep_jobs)) is not None:
        # along jobs_newest_first, from the oldest: the state as an expression (`state || ''`), since SQLite would
        # take ix_jobs_state for `state IN (...)`, which almost every job matches, and sort them all
        finished = jobs.c.state.concat("").in_((SUCCEEDED, FAILED)) & beyond
        chosen |= dict.fromkeys(_prunable(db, finished, (jobs.c.created_at, jobs.c.id), batch))
    ids = list(chosen)[:batch]
    if not ids:
        return 0
    db.execute(delete(deliveries).where(deliveries.c.job_id.in_(ids)))
    return int(db.execute(delete(jobs).where(jobs.c.id.in_(ids))).rowcount)


def _beyond_the_newest(db: Connection, count: int) -> ColumnElement[bool] | None:
    """Jobs older than the newest `count` (in the job list's order, read along its index); None when there are
    no more than `count` jobs."""
    newest_first = select(jobs.c.created_at, jobs.c.id).order_by(jobs.c.created_at.desc(), jobs.c.id.desc())
    last = db.execute(newest_first.offset(count - 1).limit(1)).first()
    if last is None:
        return None
    at: float = last.created_at
    return (jobs.c.created_at <= at) & ((jobs.c.created_at < at) | (jobs.c.id < str(last.id)))


def _prunable(db: Connection, where: ColumnElement[bool], order: tuple[Any, ...], limit: int) -> list[str]:
    """The ids of up to `limit` finished jobs matching `where`, in `order`, each a failure or a success that a
    newer success of its release replaced (so the newest success of every release is kept)."""
    if limit <= 0:
        return []
    newer = jobs.alias("newer")
    later = (newer.c.finished_at > jobs.c.finished_at) | (newer.c.id > jobs.c.id)
    replaced = select(newer.c.id).where(
        newer.c.state == SUCCEEDED,
        newer.c.finished_at >= jobs.c.finished_at,
        later,
        newer.c.release_key == jobs.c.release_key,
    )
    kept = (jobs.c.state == SUCCEEDED) & jobs.c.finished_at.is_not(None) & ~replaced.exists()
    query = select(jobs.c.id).where(where, ~kept).order_by(*order).limit(limit)
    if db.dialect.name == "postgresql":
        query = query.with_for_update(skip_locked=True, of=jobs)
    return list(db.execute(query).scalars())


def gave_up_error(attempts: int, owner: str | None, lease_expires_at: float | None) -> str:
    """Why a job is not run again: how often it was claimed, who held it last and until when (UTC)."""
    until = "an unknown time"
    if lease_expires_at is not None:
        moment = datetime.datetime.fromtimestamp(lease_expires_at, datetime.UTC)
        until = moment.isoformat(timespec="seconds").replace("+00:00", "Z")
    return (
        f"gave up after {attempts} attempts: last held by {owner or 'an unknown replica'} until {until}, when its"
        " lease ran out (each replica that ran it died or stopped answering: out of memory, say)"
    )


def _give_up(db: Connection, candidate: Any, now: float) -> Any:
    """Fail a job whose lease ran out once too often; the row as failed, or None when it changed since it
    was read (another process on SQLite got there first)."""
    error = gave_up_error(candidate.attempts, candidate.owner, candidate.lease_expires_at)
    unchanged = (jobs.c.id == candidate.id) & (jobs.c.attempts == candidate.attempts) & _lease_ran_out(now)
    failed = update(jobs).where(unchanged).values(state=FAILED, finished_at=now, error=stored_error(error))
    return db.execute(failed.returning(jobs)).first()


def _enqueue_once(db: Connection, ask: _Ask, now: float) -> tuple[Any, bool]:
    """One attempt at `enqueue`, in one transaction: the job that answers, and whether it is new."""
    stale = None
    if ask.delivery is not None:
        seen = _job_of_delivery(db, ask.delivery)
        if seen is not None and (seen.state in ANSWERING or ask.delivery.startswith(TICK_DELIVERY)):
            return seen, False
        stale = seen  # its job failed: the delivery asks again
    taken, state = _taking_job(db, ask.key, now - ask.done_within if ask.done_within > 0 else None)
    if taken is not None:
        return (_point(db, ask.delivery, taken, stale) if ask.delivery is not None else taken), False
    if ask.max_queued is not None:
        _check_room(db, ask.max_queued)
    return _insert(db, ask, now, stale, state), True


def _taking_job(db: Connection, key: str, since: float | None) -> tuple[Any, str]:
    """The job that takes a delivery for the release, if any, and the state of a new one. The release's queued
    job; else, while a job of it runs, its waiting follow-up (a new one waits); else, given `since`, its job
    that succeeded since then (a running job takes nothing: whatever was announced may postdate its look)."""
    queued = db.execute(select(jobs).where(jobs.c.release_key == key, _queued)).first()
    if queued is not None:
        return queued, QUEUED
    if db.execute(select(jobs.c.id).where(jobs.c.release_key == key, _running)).first() is not None:
        return db.execute(select(jobs).where(jobs.c.release_key == key, _waiting)).first(), WAITING
    if since is None:
        return None, QUEUED
    recent = (jobs.c.release_key == key) & (jobs.c.state == SUCCEEDED) & (jobs.c.finished_at >= since)
    return db.execute(select(jobs).where(recent).order_by(jobs.c.finished_at.desc()).limit(1)).first(), QUEUED


def _check_room(db: Connection, limit: int) -> None:
    """QueueFull when `limit` jobs are queued or waiting. On PostgreSQL, replicas count and insert one at a time."""
    if db.dialect.name == "postgresql":
        db.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": database.advisory_key(database.QUEUE_LOCK)})
    queued = db.execute(select(func.count()).select_from(jobs).where(_queued | _waiting)).scalar_one()
    if queued >= limit:
        raise QueueFull(queued, limit)


def _insert(db: Connection, ask: _Ask, now: float, stale: Any, state: str) -> Any:
    """A new job (queued, or waiting for its release's running job), answering the delivery (taken from `stale`,
    the failed job it answered, if any)."""
    if stale is not None:  # the delivery column names the job that answers it, now this one
        db.execute(update(jobs).where(jobs.c.delivery == ask.delivery, jobs.c.state == FAILED).values(delivery=None))
    job = {
        "id": uuid.uuid4().hex,
        "kind": ask.kind,
        "versions": json.dumps(ask.versions) if ask.versions is not None else None,
        "release_key": ask.key,
        "delivery": ask.delivery,
        "state": state,
        "attempts": 0,
        "created_at": now,
    }
    row = db.execute(insert(jobs).values(**job).returning(jobs)).one()
    if ask.delivery is not None:
        answering = _point(db, ask.delivery, row, stale)
        if answering is None or answering.id != row.id:
            raise _Raced  # a racing replica's job took the delivery first: ours is rolled back
    return row


def _point(db: Connection, delivery: str, job: Any, stale: Any) -> Any:
    """Note that `job` (its row) answers `delivery`, moved from `stale` (its failed job) if there was one; the
    job that now answers it (this one, or the one a racing replica noted)."""
    if stale is not None:
        moved = update(deliveries).where(deliveries.c.delivery == delivery, deliveries.c.job_id == stale.id)
        if db.execute(moved.values(job_id=job.id)).rowcount:
            return _job_of_delivery(db, delivery)
    noted = db.execute(select(func.count()).select_from(deliveries).where(deliveries.c.job_id == job.id)).scalar()
    if (noted or 0) >= MAX_DELIVERIES_PER_JOB:
        return job
    postgres = db.dialect.name == "postgresql"
    note = (pg_insert if postgres else sqlite_insert)(deliveries).values(delivery=delivery, job_id=job.id)
    db.execute(note.on_conflict_do_nothing())
    return _job_of_delivery(db, delivery)


def _job_of_delivery(db: Connection, delivery: str) -> Any:
    noted = select(deliveries.c.job_id).where(deliveries.c.delivery == delivery).scalar_subquery()
    seen = db.execute(select(jobs).where(jobs.c.id == noted)).first()
    if seen is None:  # a job recorded before the deliveries table existed
        seen = db.execute(select(jobs).where(jobs.c.delivery == delivery)).first()
    return seen


_ADDED_COLUMNS = {
    "release_key": "VARCHAR(200)",
    "owner": "VARCHAR(100)",
    "lease_expires_at": "FLOAT",
    "attempts": "INTEGER NOT NULL DEFAULT 0",
}


def _create_or_upgrade(engine: Engine) -> None:
    """Create the table, or add what an older mirror's table lacks. Safe for replicas starting together."""
    with engine.begin() as db:
        if db.dialect.name == "postgresql":  # replicas starting at once must not race on CREATE TABLE
            db.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": database.advisory_key(database.SCHEMA_LOCK)})
        present = {c["name"] for c in inspect(db).get_columns("jobs")} if inspect(db).has_table("jobs") else None
        if present is not None:
            for name, ddl in _ADDED_COLUMNS.items():
                if name not in present:
                    db.execute(text(f"ALTER TABLE jobs ADD COLUMN {name} {ddl}"))
            if "release_key" not in present:
                db.execute(update(jobs).values(release_key=func.coalesce(jobs.c.versions, DISCOVERY)))
        for retired in RETIRED_INDEXES:
            db.execute(text(f"DROP INDEX IF EXISTS {retired}"))
        if present is not None:  # a follow-up the unreleased version queued beside its running job waits instead
            running = jobs.alias("running")
            beside = select(running.c.id).where(running.c.release_key == jobs.c.release_key, running.c.state == RUNNING)
            db.execute(update(jobs).where(_queued, beside.exists()).values(state=WAITING))
        metadata.create_all(db)
        for index in (*jobs.indexes, *deliveries.indexes):  # create_all skips those of a table already there
            index.create(db, checkfirst=True)
