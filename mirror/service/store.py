"""The durable job queue: one table, SQLAlchemy Core, SQLite by default (any SQLAlchemy URL works, e.g.
PostgreSQL). A job is written before the webhook is answered, so an accepted job survives a crash."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

from sqlalchemy import Column, Float, MetaData, String, Table, Text, create_engine, insert, select, update
from sqlalchemy.engine import Connection

T = TypeVar("T")
QUEUED, RUNNING, SUCCEEDED, FAILED = "queued", "running", "succeeded", "failed"
ACTIVE = (QUEUED, RUNNING)

metadata = MetaData()
jobs = Table(
    "jobs",
    metadata,
    Column("id", String(32), primary_key=True),
    Column("kind", String(16), nullable=False),  # ci | dockerhub | schedule
    Column("versions", Text),  # JSON list; NULL means "discover"
    Column("delivery", String(200), unique=True),
    Column("state", String(16), nullable=False, index=True),
    Column("created_at", Float, nullable=False),
    Column("started_at", Float),
    Column("finished_at", Float),
    Column("result", Text),  # JSON: the releases' reports
    Column("error", Text),
)


def _row(row: Any) -> dict[str, Any]:
    job = dict(row._mapping)
    job["versions"] = json.loads(job["versions"]) if job["versions"] else None
    job["result"] = json.loads(job["result"]) if job["result"] else None
    return job


class JobStore:
    def __init__(self, url: str) -> None:
        options: dict[str, Any] = {}
        if url.startswith("sqlite"):
            options["connect_args"] = {"check_same_thread": False}
        self.engine = create_engine(url, **options)
        metadata.create_all(self.engine)
        self._lock = threading.Lock()  # SQLite takes one writer at a time

    async def _run(self, work: Callable[[Connection], T]) -> T:
        def in_transaction() -> T:
            with self._lock, self.engine.begin() as connection:
                return work(connection)

        return await asyncio.to_thread(in_transaction)

    async def enqueue(self, kind: str, versions: list[str] | None, delivery: str | None) -> tuple[dict[str, Any], bool]:
        """The new job, or the one already there for this delivery or these versions; and whether it is new."""
        encoded = json.dumps(versions) if versions is not None else None

        def work(db: Connection) -> tuple[dict[str, Any], bool]:
            if delivery is not None:
                seen = db.execute(select(jobs).where(jobs.c.delivery == delivery)).first()
                if seen is not None:
                    return _row(seen), False
            same = select(jobs).where(jobs.c.state.in_(ACTIVE))
            same = same.where(jobs.c.versions == encoded) if encoded else same.where(jobs.c.versions.is_(None))
            active = db.execute(same).first()
            if active is not None:
                return _row(active), False
            job = {
                "id": uuid.uuid4().hex,
                "kind": kind,
                "versions": encoded,
                "delivery": delivery,
                "state": QUEUED,
                "created_at": time.time(),
            }
            db.execute(insert(jobs).values(**job))
            return _row(db.execute(select(jobs).where(jobs.c.id == job["id"])).one()), True

        return await self._run(work)

    async def get(self, job_id: str) -> dict[str, Any] | None:
        row = await self._run(lambda db: db.execute(select(jobs).where(jobs.c.id == job_id)).first())
        return _row(row) if row is not None else None

    async def recent(self, limit: int = 50) -> list[dict[str, Any]]:
        rows = await self._run(
            lambda db: db.execute(select(jobs).order_by(jobs.c.created_at.desc()).limit(limit)).all()
        )
        return [_row(r) for r in rows]

    async def claim_next(self) -> dict[str, Any] | None:
        """The oldest queued job, marked running."""

        def work(db: Connection) -> dict[str, Any] | None:
            row = db.execute(select(jobs).where(jobs.c.state == QUEUED).order_by(jobs.c.created_at).limit(1)).first()
            if row is None:
                return None
            db.execute(update(jobs).where(jobs.c.id == row.id).values(state=RUNNING, started_at=time.time()))
            return _row(db.execute(select(jobs).where(jobs.c.id == row.id)).one())

        return await self._run(work)

    async def finish(self, job_id: str, state: str, result: Any, error: str | None) -> None:
        values = {"state": state, "finished_at": time.time(), "result": json.dumps(result), "error": error}
        await self._run(lambda db: db.execute(update(jobs).where(jobs.c.id == job_id).values(**values)))

    async def requeue_interrupted(self) -> int:
        """Jobs left running by a process that died: queue them again."""
        result = await self._run(
            lambda db: db.execute(update(jobs).where(jobs.c.state == RUNNING).values(state=QUEUED, started_at=None))
        )
        return int(result.rowcount)

    async def writable(self) -> bool:
        try:
            await self._run(lambda db: db.execute(select(jobs.c.id).limit(1)).all())
        except Exception:
            return False
        return True
