"""The database mirror keeps its jobs and its target locks in: the SQLAlchemy engine made from a
`database_url` (the job store's pool, or the single session a target lock lives on), which of its errors
mean "the database is away for now", and the keys of PostgreSQL's advisory locks.

Every advisory lock mirror takes is named in one namespace (`target:<registry>_<namespace>`,
`schema:jobs`, `queue:jobs`) and keyed by one function of that name, so two parts of mirror never meet on one key by
accident, and every process of every version agrees on the key of a name.

SQLAlchemy is imported only when an engine is made: a `mirror sync` with file locks never loads it."""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine
    from sqlalchemy.sql.elements import TextClause

CONNECT_SECONDS = 10  # a PostgreSQL server that does not answer: give up on this connection after this long
# A session whose server went silent (a failover, a partition) is found dead within about 30 s, idle or waiting
# for an answer: asking whether a target lock is still held, or a job store query, never hangs
SESSION_KEEPALIVES = {
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 3,
    "tcp_user_timeout": 30_000,  # ms: data sent and not acknowledged
}
# The server's side of the same: a client whose node vanished (power, a partition) sends no FIN, and the server
# keeps its session, with the target lock it holds and the job rows it locked, for its default 2 hours. Set on
# each session (a SET, which PgBouncer in session mode passes on; a startup `options` it refuses)
SERVER_KEEPALIVES = {
    "tcp_keepalives_idle": "10",
    "tcp_keepalives_interval": "5",
    "tcp_keepalives_count": "3",
    "tcp_user_timeout": "30000",  # ms; PostgreSQL 12 on
}
# sqlite3 errors worth a retry: a full disk ("database or disk is full") frees up once space is made; a file
# that takes no writes ("attempt to write a readonly database": a volume remounted read-only after an I/O error)
# once it is mounted again, as a PostgreSQL standby's 25006 below
SQLITE_FOR_NOW = ("locked", "busy", "unable to open", "disk i/o", "disk is full", "readonly database")
# SQLSTATEs worth a retry whatever the driver's error class: disk_full, and read_only_sql_transaction (a server
# that a failover made a standby, until the pool's sessions reach the new primary)
POSTGRES_FOR_NOW = ("53100", "25006")
SQLITE_BUSY_SECONDS = 30  # how long SQLite waits for another writer's lock
POOL_SIZE, POOL_OVERFLOW = 4, 4

SCHEMA_LOCK = "schema:jobs"  # one replica at a time creates or upgrades the job tables
QUEUE_LOCK = "queue:jobs"  # one replica at a time counts the queued jobs and adds one (service.max_queued_jobs)


def target_lock(name: str) -> str:
    """The advisory lock that makes one sync at a time write to a target (`name` from `engine/lock.py`)."""
    return f"target:{name}"


def advisory_key(name: str) -> int:
    """The signed 64-bit key of an advisory lock's name (`pg_advisory_lock` takes a bigint): stable across
    processes and versions, since a CronJob and replicas of another release may hold the same lock."""
    return int.from_bytes(hashlib.sha256(f"mirror-{name}".encode()).digest()[:8], "big", signed=True)


def holds_advisory_lock(key: int) -> TextClause:
    """Whether this session holds the session-level advisory lock `key`; pg_locks shows a bigint key as its
    high and low 32 bits (`classid`, `objid`) with `objsubid` 1."""
    from sqlalchemy import text

    statement = text(
        "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted"
        " AND objsubid = 1 AND classid::bigint = :high AND objid::bigint = :low)"
    )
    return statement.bindparams(high=(key >> 32) & 0xFFFFFFFF, low=key & 0xFFFFFFFF)


def is_postgresql(url: str | None) -> bool:
    """Whether `url` names PostgreSQL: the database replicas, the CronJob and hand runs can share (None: none)."""
    return url is not None and url.startswith("postgresql")


def open_engine(url: str, *, pooled: bool = True) -> Engine:
    """The engine for `url`. Pooled: the job store's connections, checked before use (a server restarted
    since is reconnected, not an error). Not pooled: each `connect()` is a session of its own, closed for
    good when released, which a session-level advisory lock needs. Both with TCP keepalives
    (SESSION_KEEPALIVES, unless the URL sets them): a claim, a lease's renewal or a job's end in flight when
    the server went silent fails within about 30 s rather than the kernel's 15 minutes, so the runner sees its
    lease at risk. A PostgreSQL server that does not answer costs at most CONNECT_SECONDS per connection
    (libpq's connect_timeout, unless the URL sets one)."""
    from sqlalchemy import create_engine, event
    from sqlalchemy.engine import make_url
    from sqlalchemy.pool import NullPool

    if url.startswith("sqlite"):
        return create_engine(url, connect_args={"check_same_thread": False, "timeout": SQLITE_BUSY_SECONDS})
    parsed = make_url(url)
    libpq = parsed.get_driver_name() in ("psycopg", "psycopg2")
    timeout = {"connect_timeout": CONNECT_SECONDS} if libpq and "connect_timeout" not in parsed.query else {}
    keepalives = {k: v for k, v in SESSION_KEEPALIVES.items() if k not in parsed.query} if libpq else {}
    if not pooled:
        engine = create_engine(url, poolclass=NullPool, connect_args=timeout | keepalives)
    else:
        pool = {"pool_pre_ping": True, "pool_size": POOL_SIZE, "max_overflow": POOL_OVERFLOW}
        engine = create_engine(url, **pool, connect_args=timeout | keepalives)
    if parsed.get_backend_name() == "postgresql":
        event.listen(engine, "connect", _server_keepalives)
    return engine


def _server_keepalives(connection: Any, _record: Any) -> None:
    """The server's keepalives on a new session (`SERVER_KEEPALIVES`), committed: a rolled-back SET reverts."""
    cursor = connection.cursor()
    try:
        cursor.execute("SELECT current_setting('server_version_num')::int")
        version = cursor.fetchone()[0]
        for name, value in SERVER_KEEPALIVES.items():
            if name != "tcp_user_timeout" or version >= 120000:
                cursor.execute("SELECT set_config(%s, %s, false)", (name, value))
    finally:
        cursor.close()
    connection.commit()


def unavailable(error: BaseException) -> bool:
    """Whether `error` says the database could not be reached or used for now (the server is down,
    restarting, the connection dropped, SQLite's file is locked, the pool is exhausted, the disk is full): worth
    trying again later. A refused statement (bad data, a constraint, bad SQL) is not: it would be refused again."""
    from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
    from sqlalchemy.exc import TimeoutError as PoolTimeout

    if isinstance(error, OperationalError) and type(error.orig).__module__ == "sqlite3":
        # sqlite3 raises OperationalError for refused statements too ("no such table"): only these are for now
        return any(word in str(error.orig).lower() for word in SQLITE_FOR_NOW)
    if isinstance(error, DBAPIError) and _sqlstate(error.orig) in POSTGRES_FOR_NOW:
        return True
    if isinstance(error, (OperationalError, InterfaceError, PoolTimeout)):
        return True
    return isinstance(error, DBAPIError) and error.connection_invalidated


def _sqlstate(orig: BaseException | None) -> str | None:
    """PostgreSQL's SQLSTATE of a driver's error (psycopg's `sqlstate`, psycopg2's `pgcode`), if it has one."""
    return getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)


def driver_reason(error: BaseException) -> str:
    """The first line of the driver's message, never the URL (which may hold a password)."""
    reason = str(getattr(error, "orig", None) or type(error).__name__).strip()
    return reason.splitlines()[0] if reason else type(error).__name__
