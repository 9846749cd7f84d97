"""The durable job queue: one table in SQLAlchemy Core, shared by every replica of `mirror serve`.

SQLite (the default, under `state_dir`) serves one replica. PostgreSQL serves several: a job is written
before the webhook is answered, claimed atomically (`FOR UPDATE SKIP LOCKED`; a conditional update
elsewhere), and held under a lease that its runner renews. A job whose lease expired (its replica died), or
that an older mirror without leases left running, is claimed again by whoever looks next; a live replica's
job is never taken, and a job whose lease ran out `max_attempts` times (it kills its replica each time) is
failed by the claim that finds it, in the same transaction, instead of being run again. At most one queued
or running job per release is enforced by a partial unique index, not by a read-then-write.

Time comes from one clock, read once per transaction: the one given (the tests move a fake one), else
PostgreSQL's own (`clock_timestamp()`), so replicas with skewed clocks agree on when a lease ends; SQLite
serves one replica on one machine, whose clock (`time.time`) is the database's.

Every string a job carries is bounded: the columns' lengths are checked by the service before a delivery id
reaches `enqueue`, and a job's error is cut to `MAX_ERROR_CHARS` here, at write, so nothing longer is stored.
"""

from __future__ import annotations

import asyncio
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
    MetaData,
    String,
    Table,
    Text,
    and_,
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
QUEUED, RUNNING, SUCCEEDED, FAILED = "queued", "running", "succeeded", "failed"
ACTIVE = (QUEUED, RUNNING)
STATES = (QUEUED, RUNNING, SUCCEEDED, FAILED)
KINDS = ("ci", "dockerhub", "schedule")
DISCOVERY = "discover"  # the release key of a discovery job
ENQUEUE_ATTEMPTS = 5
MAX_DELIVERY_CHARS = 200  # the delivery columns' length
MAX_ERROR_CHARS = 500  # a job's error as stored (and so as served and logged)
MAX_ATTEMPTS = 3  # service.max_attempts's default
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
# Every delivery a job answers: the one that created it, and those merged into it while it was active, so a
# resent delivery finds its job even after that job finished.
deliveries = Table(
    "deliveries",
    metadata,
    Column("delivery", String(200), primary_key=True),
    Column("job_id", String(32), nullable=False),
)
_active = jobs.c.state.in_(ACTIVE)
Index("jobs_one_active_per_release", jobs.c.release_key, unique=True, sqlite_where=_active, postgresql_where=_active)
Index("jobs_newest_first", jobs.c.created_at, jobs.c.id)  # the job list's order and its cursor


class UnknownJob(LookupError):
    """A job id (the job list's cursor) that names no job."""


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
        self, kind: str, versions: list[str] | None, delivery: str | None, done_within: float = 0.0
    ) -> tuple[dict[str, Any], bool]:
        """The new job, or the one already there for this delivery or this release; and whether it is new.
        The database's unique constraints decide, so two replicas taking the same delivery make one job.
        With `done_within`, a release whose job succeeded less than that many seconds ago is answered by that
        job (a replayed webhook queues nothing)."""
        if delivery is not None and len(delivery) > MAX_DELIVERY_CHARS:
            raise ValueError(f"delivery id of {len(delivery)} characters: at most {MAX_DELIVERY_CHARS}")
        key = release_key(versions)
        if done_within > 0:
            done = await self._run(
                lambda db: _recently_done(db, delivery, key, self._now(db) - done_within, self.postgres)
            )
            if done is not None:
                return _row(done), False
        for _ in range(ENQUEUE_ATTEMPTS):
            job = {
                "id": uuid.uuid4().hex,
                "kind": kind,
                "versions": json.dumps(versions) if versions is not None else None,
                "release_key": key,
                "delivery": delivery,
                "state": QUEUED,
                "attempts": 0,
            }
            try:
                return _row(await self._run(self._inserter(job))), True
            except IntegrityError:
                existing = await self._run(lambda db: _existing(db, delivery, key, self.postgres))
                if existing is not None:
                    return _row(existing), False
                # the active job of this release finished between our insert and our look: insert again
        raise RuntimeError(f"could not queue a job for {key} after {ENQUEUE_ATTEMPTS} attempts")

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

        def work(db: Connection) -> list[Any]:
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
            newest_first = query.order_by(jobs.c.created_at.desc(), jobs.c.id.desc()).limit(limit + 1)
            return list(db.execute(newest_first).all())

        rows = await self._run(work)
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
        `on_give_up` once the transaction is committed), and the next one looked at."""

        def work(db: Connection) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
            now = self._now(db)
            given_up = []
            while (candidate := self._oldest_claimable(db, now)) is not None:
                if candidate.state == RUNNING and candidate.attempts >= max_attempts:
                    failed = _give_up(db, candidate, now)
                    if failed is not None:
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

    def _oldest_claimable(self, db: Connection, now: float) -> Any:
        """The oldest claimable job's id, state and lease; on PostgreSQL locked for this transaction, jobs
        another replica is claiming at this moment skipped."""
        columns = (jobs.c.id, jobs.c.state, jobs.c.attempts, jobs.c.owner, jobs.c.lease_expires_at)
        oldest = select(*columns).where(_claimable(now)).order_by(jobs.c.created_at, jobs.c.id).limit(1)
        if self.postgres:
            oldest = oldest.with_for_update(skip_locked=True)
        return db.execute(oldest).first()

    async def renew(self, job_id: str, owner: str, lease: float) -> bool:
        """Extend the lease; False when `owner` no longer holds it (it expired and another replica took it)."""

        def work(db: Connection) -> bool:
            renewed = update(jobs).where(_held(job_id, owner)).values(lease_expires_at=self._now(db) + lease)
            return bool(db.execute(renewed).rowcount)

        return await self._run(work)

    async def finish(self, job_id: str, owner: str, state: str, result: Any, error: str | None) -> bool:
        """Record the outcome; False (nothing written) when `owner` lost the lease meanwhile."""
        values = {
            "state": state,
            "result": json.dumps(result),
            "error": stored_error(error) if error is not None else None,
        }
        return await self._update_held(job_id, owner, values, finished=True)

    async def release(self, job_id: str, owner: str) -> bool:
        """Give an unfinished job back to the queue (a replica shutting down), for another replica to take;
        its claim is given back too, so shutdowns never count towards `max_attempts`."""
        values = {"state": QUEUED, "owner": None, "lease_expires_at": None, "attempts": jobs.c.attempts - 1}
        return await self._update_held(job_id, owner, values)

    async def _update_held(self, job_id: str, owner: str, values: dict[str, Any], finished: bool = False) -> bool:
        """Write to a running job only while `owner` holds its lease; False when it does not."""

        def work(db: Connection) -> bool:
            stamp = {"finished_at": self._now(db)} if finished else {}
            statement = update(jobs).where(_held(job_id, owner)).values(**values, **stamp)
            return bool(db.execute(statement).rowcount)

        return await self._run(work)

    def _inserter(self, job: dict[str, Any]) -> Callable[[Connection], Any]:
        def work(db: Connection) -> Any:
            row = db.execute(insert(jobs).values(**job, created_at=self._now(db)).returning(jobs)).one()
            if job["delivery"] is not None:
                db.execute(insert(deliveries).values(delivery=job["delivery"], job_id=job["id"]))
            return row

        return work

    async def writable(self) -> bool:
        try:
            await self._run(lambda db: db.execute(select(jobs.c.id).limit(1)).all())
        except Exception:
            return False
        return True

    def close(self) -> None:
        self.engine.dispose()


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
    return or_(jobs.c.state == QUEUED, _lease_ran_out(now))


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


def _existing(db: Connection, delivery: str | None, key: str, postgres: bool) -> Any:
    """The job that already answers this delivery, else the release's active job (which then answers the
    delivery too)."""
    if delivery is not None:
        seen = _job_of_delivery(db, delivery)
        if seen is not None:
            return seen
    active = db.execute(select(jobs).where(jobs.c.release_key == key, _active)).first()
    if active is not None and delivery is not None:
        return _answered_by(db, active, delivery, postgres)
    return active


def _recently_done(db: Connection, delivery: str | None, key: str, since: float, postgres: bool) -> Any:
    """The job that answers this delivery, or the release's job that succeeded `since` then (which
    then answers the delivery too); None when the release has an active job, which `enqueue` merges into."""
    if delivery is not None:
        seen = _job_of_delivery(db, delivery)
        if seen is not None:
            return seen
    if db.execute(select(jobs.c.id).where(jobs.c.release_key == key, _active)).first() is not None:
        return None
    recent = (jobs.c.release_key == key) & (jobs.c.state == SUCCEEDED) & (jobs.c.finished_at >= since)
    done = db.execute(select(jobs).where(recent).order_by(jobs.c.finished_at.desc()).limit(1)).first()
    if done is not None and delivery is not None:
        return _answered_by(db, done, delivery, postgres)
    return done


def _answered_by(db: Connection, job: Any, delivery: str, postgres: bool) -> Any:
    """Note that `job` answers `delivery`; the job that does (this one, or the one a racing replica noted)."""
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
        metadata.create_all(db)
        for index in jobs.indexes:  # create_all skips the indexes of a table that was already there
            index.create(db, checkfirst=True)
