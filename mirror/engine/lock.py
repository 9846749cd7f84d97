"""One sync per target at a time: an exclusive lock per target repository prefix (registry + namespace),
held for the whole run. A second run waits for it, up to `lock_timeout`.

Where the lock lives:
- with a PostgreSQL `database_url`: a session-level advisory lock in that database, shared by the CronJob,
  every `mirror serve` replica and a `mirror sync` run by hand with the same config. The database releases
  it when the holder's connection ends, a killed process included.
- otherwise: a lock file (`flock`) under `lock_dir` (by default `<state_dir>/locks`), shared by every run
  with that directory.

The database's side (its engine, the lock's key) is `mirror/database.py`'s.
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import re
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any, Protocol

from mirror import database
from mirror.engine.jobs import ReleaseJob
from mirror.errors import MirrorError
from mirror.settings import MirrorSettings

log = logging.getLogger("mirror")
POLL_SECONDS = 0.2


class LockTimeout(MirrorError):
    """Another sync held a target's lock for longer than `lock_timeout`, or the lock could not be taken."""


class LockUnavailable(LockTimeout):
    """The database that holds the target locks cannot be reached."""


def lock_name(registry: str, namespace: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", f"{registry}_{namespace}")


def lock_dir(settings: MirrorSettings) -> Path:
    """Where the lock files are: `lock_dir`, else `<state_dir>/locks` (kept with the state, not in /tmp)."""
    return settings.lock_dir or settings.state_dir / "locks"


def uses_database_locks(settings: MirrorSettings) -> bool:
    return bool(settings.database_url and database.is_postgresql(settings.database_url))


@asynccontextmanager
async def target_locks(settings: MirrorSettings, jobs: list[ReleaseJob], enabled: bool = True) -> AsyncIterator[None]:
    names = sorted({lock_name(t.registry, t.namespace) for job in jobs for t in job.targets})
    async with AsyncExitStack() as held:
        if enabled:
            database = uses_database_locks(settings)
            for name in names:  # always in the same order: two runs never wait on each other in a circle
                lock: TargetLock = (
                    AdvisoryLock(settings.database_url or "", name) if database else FileLock(lock_dir(settings) / name)
                )
                await held.enter_async_context(_waiting(lock, name, settings.lock_timeout))
        yield


@asynccontextmanager
async def _waiting(attempts: TargetLock, name: str, wait_limit: float) -> AsyncIterator[None]:
    """Try the lock until it is ours or `wait_limit` passes; release it on the way out."""
    started = time.monotonic()
    announced = False
    try:
        while not await attempts.try_acquire():
            if time.monotonic() - started >= wait_limit:
                raise LockTimeout(
                    f"another mirror sync holds the lock on {name} ({attempts.where}; lock_timeout {wait_limit:.0f} s"
                    " passed)"
                )
            if not announced:
                log.warning("waiting for another mirror sync of the same target (%s, %s)", name, attempts.where)
                announced = True
            await asyncio.sleep(POLL_SECONDS)
        yield
    finally:
        await attempts.close()


class TargetLock(Protocol):
    where: str

    async def try_acquire(self) -> bool: ...

    async def close(self) -> None: ...


class FileLock:
    def __init__(self, stem: Path) -> None:
        path = stem.with_name(stem.name + ".lock")
        self.where = f"lock file {path}"
        path.parent.mkdir(parents=True, exist_ok=True)
        self.fd: int | None = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)

    async def try_acquire(self) -> bool:
        assert self.fd is not None
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        os.ftruncate(self.fd, 0)
        os.write(self.fd, f"{os.getpid()}\n".encode())
        return True

    async def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing the descriptor releases the lock
            self.fd = None


class AdvisoryLock:
    def __init__(self, url: str, name: str) -> None:
        self.where = "PostgreSQL advisory lock"
        self.url = url
        self.key = database.advisory_key(database.target_lock(name))
        self.connection: Any = None

    async def try_acquire(self) -> bool:
        return await asyncio.to_thread(self._try)

    def _try(self) -> bool:
        from sqlalchemy import text
        from sqlalchemy.exc import SQLAlchemyError

        try:
            if self.connection is None:  # one connection for the lock's whole life: the lock is the session's
                self.connection = database.open_engine(self.url, pooled=False).connect()
            got = self.connection.execute(text("SELECT pg_try_advisory_lock(:key)"), {"key": self.key}).scalar()
            self.connection.commit()
        except SQLAlchemyError as exc:  # the message of the driver, never the URL (it may hold a password)
            reason = database.driver_reason(exc)
            raise LockUnavailable(f"cannot take the target lock in the database: {reason}") from None
        return bool(got)

    async def close(self) -> None:
        if self.connection is not None:
            connection, self.connection = self.connection, None
            await asyncio.to_thread(connection.close)  # ending the session releases the lock
