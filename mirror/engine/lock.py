"""One sync per target at a time: an exclusive lock per target repository prefix (registry + namespace),
held for the whole run. A second run waits for it, up to `lock_timeout`.

Where the lock lives:
- with a PostgreSQL `database_url`: a session-level advisory lock in that database, shared by the CronJob,
  every `mirror serve` replica and a `mirror sync` run by hand with the same config. The database releases
  it when the holder's connection ends, a killed process included.
- otherwise: a lock file (`flock`) under `lock_dir` (by default `<state_dir>/locks`), shared by every run
  with that directory.

An advisory lock is the session's, and a session can end under a run that holds it (a server restart, a
failover, an idle timeout, `pg_terminate_backend`): another run may then take the lock. So while a run holds
its locks, each is checked every LOCK_CHECK_SECONDS; a lost one stops the run as a shutdown does (whoever
registered with `on_lock_lost`: nothing new starts, in-flight uploads get `shutdown_grace`), and the run ends
with `LockLost`. A lock file is held by its descriptor for the life of the process: it cannot be lost.

The database's side (its engine, the lock's key) is `mirror/database.py`'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import re
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Protocol

from mirror import database
from mirror.engine.jobs import ReleaseJob
from mirror.engine.shutdown import Interrupted, Shutdown
from mirror.errors import MirrorError
from mirror.settings import MirrorSettings

log = logging.getLogger("mirror")
POLL_SECONDS = 0.2
LOCK_CHECK_SECONDS = 5.0  # how often a held lock's session is checked: a lost lock goes unnoticed this long at most


class LockTimeout(MirrorError):
    """Another sync held a target's lock for longer than `lock_timeout`, or the lock could not be taken."""


class LockUnavailable(LockTimeout):
    """The database that holds the target locks cannot be reached."""


class LockDirUnusable(LockTimeout):
    """A target's lock file cannot be made or locked: `lock_dir` is read-only, full, or not a directory."""


class LockLost(MirrorError):
    """A target lock the run held was lost (its database session ended): the run stopped, unfinished."""


def lock_name(registry: str, namespace: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", f"{registry}_{namespace}")


def lock_dir(settings: MirrorSettings) -> Path:
    """Where the lock files are: `lock_dir`, else `<state_dir>/locks` (kept with the state, not in /tmp)."""
    return settings.lock_dir or settings.state_dir / "locks"


def uses_database_locks(settings: MirrorSettings) -> bool:
    return database.is_postgresql(settings.database_url)


@asynccontextmanager
async def target_locks(
    settings: MirrorSettings, jobs: list[ReleaseJob], enabled: bool = True, shutdown: Shutdown | None = None
) -> AsyncIterator[bool]:
    """Hold every target's lock for the body, watched; raises LockLost after a body that ran while one was lost,
    and Interrupted if the run is stopped while it waits for one. The body is told whether it had to wait for a
    lock (another run held it: what was learnt before may have changed since)."""
    names = sorted({lock_name(t.registry, t.namespace) for job in jobs for t in job.targets})
    async with AsyncExitStack() as held:
        locks: dict[str, TargetLock] = {}
        waited = False
        if enabled:
            database = uses_database_locks(settings)
            for name in names:  # always in the same order: two runs never wait on each other in a circle
                lock: TargetLock = (
                    AdvisoryLock(settings.database_url or "", name) if database else FileLock(lock_dir(settings) / name)
                )
                gate = _waiting(lock, name, settings.lock_timeout, shutdown or Shutdown())
                waited = await held.enter_async_context(gate) or waited
                locks[name] = lock
        async with _watched(locks):
            yield waited


_watch: ContextVar[LockWatch | None] = ContextVar("mirror_target_lock_watch", default=None)


def on_lock_lost(callback: Callable[[str], None]) -> None:
    """Have `callback` told why, should a target lock of the run under way be lost (nothing without locks)."""
    watch = _watch.get()
    if watch is not None:
        watch.callbacks.append(callback)
        if watch.lost is not None:
            callback(watch.lost)


@asynccontextmanager
async def _watched(locks: dict[str, TargetLock]) -> AsyncIterator[None]:
    if not locks:
        yield
        return
    watch = LockWatch(locks)
    token = _watch.set(watch)  # seen by what the body starts: its tasks copy the context
    checking = asyncio.create_task(watch.run())
    try:
        yield
    finally:
        checking.cancel()
        await asyncio.wait({checking})
        _watch.reset(token)
    if watch.lost is not None:
        raise LockLost(f"{watch.lost}; the run stopped unfinished, for the next run to complete")


class LockWatch:
    """A run's held locks, each checked every LOCK_CHECK_SECONDS; the first found lost is told to every
    callback, once."""

    def __init__(self, locks: dict[str, TargetLock]) -> None:
        self.locks = locks
        self.callbacks: list[Callable[[str], None]] = []
        self.lost: str | None = None

    async def run(self) -> None:
        while self.lost is None:
            await asyncio.sleep(LOCK_CHECK_SECONDS)
            for name, lock in self.locks.items():
                reason = await lock.lost()
                if reason is not None:
                    self._lose(f"lost the target lock on {name} ({lock.where}: {reason})")
                    break

    def _lose(self, why: str) -> None:
        self.lost = why
        log.error("%s: another run may take it now; this run starts nothing new", why)
        for callback in self.callbacks:
            callback(why)


@asynccontextmanager
async def _waiting(attempts: TargetLock, name: str, wait_limit: float, shutdown: Shutdown) -> AsyncIterator[bool]:
    """Try the lock until it is ours, `wait_limit` passes or the run is stopped, and say whether it had to wait;
    release it on the way out."""
    started = time.monotonic()
    announced = False
    try:
        while not await attempts.try_acquire():
            if shutdown.stopping:
                raise Interrupted(f"stopped while waiting for the lock on {name}: nothing was copied")
            if time.monotonic() - started >= wait_limit:
                raise LockTimeout(
                    f"another mirror sync holds the lock on {name} ({attempts.where}; lock_timeout {wait_limit:.0f} s"
                    " passed)"
                )
            if not announced:
                log.warning("waiting for another mirror sync of the same target (%s, %s)", name, attempts.where)
                announced = True
            await asyncio.sleep(POLL_SECONDS)
        yield announced
    finally:
        await attempts.close()


class TargetLock(Protocol):
    where: str

    async def try_acquire(self) -> bool: ...

    async def lost(self) -> str | None:
        """None while the lock is held; else why it no longer is."""
        ...

    async def close(self) -> None: ...


class FileLock:
    def __init__(self, stem: Path) -> None:
        self.path = stem.with_name(stem.name + ".lock")
        self.where = f"lock file {self.path}"
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.fd: int | None = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise self._unusable("cannot make", exc) from None

    def _unusable(self, doing: str, exc: OSError) -> LockDirUnusable:
        return LockDirUnusable(
            f"{doing} the target lock file {self.path.name} in {self.path.parent} ({exc.strerror}): set lock_dir"
            " to a writable directory (by default it is <state_dir>/locks)"
        )

    async def try_acquire(self) -> bool:
        assert self.fd is not None
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        except OSError as exc:  # a file system without locks (ENOLCK)
            raise self._unusable("cannot lock", exc) from None
        with contextlib.suppress(OSError):  # the holder's pid, for a person to read: the lock holds without it
            os.ftruncate(self.fd, 0)
            os.write(self.fd, f"{os.getpid()}\n".encode())
        return True

    async def lost(self) -> str | None:
        return None  # held by the open descriptor until it is closed

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
        self._using = threading.Lock()  # the session is used from worker threads, one statement at a time

    async def try_acquire(self) -> bool:
        return await asyncio.to_thread(self._try)

    def _try(self) -> bool:
        from sqlalchemy import text
        from sqlalchemy.exc import SQLAlchemyError

        try:
            with self._using:
                if self.connection is None:  # one connection for the lock's whole life: the lock is the session's
                    self.connection = database.open_engine(self.url, pooled=False).connect()
                got = self.connection.execute(text("SELECT pg_try_advisory_lock(:key)"), {"key": self.key}).scalar()
                self.connection.commit()
        except SQLAlchemyError as exc:  # the message of the driver, never the URL (it may hold a password)
            reason = database.driver_reason(exc)
            raise LockUnavailable(f"cannot take the target lock in the database: {reason}") from None
        return bool(got)

    async def lost(self) -> str | None:
        return await asyncio.to_thread(self._lost)

    def _lost(self) -> str | None:
        """Asked of the lock's own session: a session that ended fails the statement, and one SQLAlchemy
        opened again in its place holds no lock."""
        from sqlalchemy.exc import SQLAlchemyError

        try:
            with self._using:
                if self.connection is None:
                    return "its session is closed"
                held = self.connection.execute(database.holds_advisory_lock(self.key)).scalar()
                self.connection.commit()
        except SQLAlchemyError as exc:
            return f"its database session ended: {database.driver_reason(exc)}"
        return None if held else "its database session no longer holds it"

    async def close(self) -> None:
        await asyncio.to_thread(self._close)

    def _close(self) -> None:
        with self._using:
            if self.connection is not None:
                connection, self.connection = self.connection, None
                connection.close()  # ending the session releases the lock
