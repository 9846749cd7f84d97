"""Runs queued jobs one at a time with the sync engine, and records what happened.

Recording meets two kinds of failure. The database being away (down, restarting, a dropped connection) is
waited out: the lease runs out and the job is run again, by this replica or another. Anything else is a bug
(a report that does not serialise, say): it would fail the same way every time, so the job is recorded as
failed with "internal error: ..." and the traceback logged once."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from typing import TYPE_CHECKING, Any

from sqlalchemy.exc import SQLAlchemyError

from mirror import database
from mirror.engine.clients import Clients
from mirror.engine.lock import LockDirUnusable, LockLost, LockTimeout, LockUnavailable
from mirror.engine.shutdown import Interrupted, Shutdown
from mirror.engine.sync import SyncOptions, discover_and_sync, sync
from mirror.errors import MirrorError
from mirror.progress import Progress
from mirror.report import ReleaseResult
from mirror.service.logs import current_job
from mirror.service.metrics import Metrics
from mirror.service.store import (
    FAILED,
    LOCK_WAIT,
    LOCKS_AWAY,
    LOST_LOCK,
    MAX_ERROR_CHARS,
    QUEUED,
    SHUTTING_DOWN,
    SUCCEEDED,
    JobStore,
    new_owner_id,
)
from mirror.settings import MirrorSettings
from mirror.untrusted import clip

if TYPE_CHECKING:
    from mirror.notify.events import JobLinks

log = logging.getLogger("mirror.service")


def internal_error(exc: BaseException) -> str:
    """A bug's one line, as stored on its job."""
    return clip(f"internal error: {type(exc).__name__}: {_reason(exc)}", MAX_ERROR_CHARS)


def _reason(exc: BaseException) -> str:
    """An error's words: a statement the database refused is told by the driver's first line (SQLAlchemy's text
    carries the statement and its parameters)."""
    return database.driver_reason(exc) if isinstance(exc, SQLAlchemyError) else str(exc)


def job_record(results: list[ReleaseResult]) -> list[dict[str, Any]]:
    """The reports as stored with the job, each values file's text included, and the files beside it named by
    their sha256 (`job_files` holds their bytes): any replica serves a job's own, whatever was written since."""
    records = []
    for result in results:
        record = result.to_json()
        for entry, written in zip(record["values"], result.values, strict=True):
            entry["content"] = written.text
            entry["files"] = [{"name": name, "sha256": _sha256(content)} for name, content in written.beside]
        records.append(record)
    return records


def job_files(results: list[ReleaseResult]) -> dict[str, bytes]:
    """What the job wrote beside its values, by sha256, to keep with its record."""
    return {_sha256(content): content for r in results for v in r.values for _, content in v.beside}


def _sha256(content: bytes) -> str:
    return hashlib.sha256(content).hexdigest()


RELEASE_SECONDS = 10.0  # how long a stop waits for a cut job to be given back
PRUNE_EVERY = 600.0  # seconds: how often a replica deletes old jobs (service.keep_jobs_days, keep_jobs), after a job


class JobRunner:
    """Claims jobs from the shared store one at a time, holds each under a lease that a heartbeat renews,
    and records the outcome. Several replicas may run one each over the same database."""

    def __init__(self, settings: MirrorSettings, store: JobStore, metrics: Metrics) -> None:
        self.settings = settings
        self.store = store
        self.metrics = metrics
        self.owner = new_owner_id()
        self.lease = settings.service.lease_seconds
        self.wake = asyncio.Event()
        self.stopping = False
        self.job_shutdown: Shutdown | None = None  # the running job's: SIGTERM or a lost lease stops it
        self.current: str | None = None
        self._task: asyncio.Task[None] | None = None
        self._announcing: set[asyncio.Task[object]] = set()  # notifications on their way: never waited for by a job
        self._pruned_at: float | None = None  # time.monotonic() of this replica's last prune

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop())

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def stop(self, grace: float) -> None:
        """Start no new job; let the running one reach a safe point within `grace` seconds."""
        if self._task is None:
            return
        self.stopping = True
        if self.job_shutdown is not None:
            self.job_shutdown.request(grace, "shutdown")
        self.wake.set()
        try:
            await asyncio.wait_for(asyncio.shield(self._task), grace + 5)
        except TimeoutError:  # a job that reaches no safe point (waiting on a lock, a render): cut, given back
            self._task.cancel()
            await asyncio.wait({self._task}, timeout=RELEASE_SECONDS)
        if self._announcing:  # each is bounded by notify.deadline, and the ledger's two writes around it
            await asyncio.wait(self._announcing, timeout=self.settings.notify.deadline + RELEASE_SECONDS)

    async def _loop(self) -> None:
        log.info("job runner %s: leases of %.0f s", self.owner, self.lease)
        while not self.stopping:
            try:
                job = await self.store.claim_next(
                    self.owner, self.lease, self.settings.service.max_attempts, self._gave_up
                )
            except Exception as exc:  # the database is away for a moment: keep the runner, try again
                log.warning("could not look for work: %s", clip(str(exc)))
                job = None
            if job is None:
                self.wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.wake.wait(), self.settings.service.poll_seconds)
                continue
            if self.stopping:  # claimed as this replica began to stop: given back before it starts
                await self._give_back(job["id"], SHUTTING_DOWN)
                return
            if job["attempts"] > 1:
                log.warning("job %s: its lease expired under another replica; taking it over", job["id"])
            try:
                await self.run(job)
            except Exception:  # a bug past the job's own record (its metrics, its message): the runner goes on
                log.exception("job %s: an error after its run; the runner goes on to the next job", job["id"])

    async def run(self, job: dict[str, Any]) -> None:
        token = current_job.set(job["id"])
        self.current = job["id"]
        shutdown = self.job_shutdown = Shutdown()
        heartbeat = asyncio.create_task(self._heartbeat(job["id"], shutdown))
        try:
            await self._run(job, shutdown)
        finally:
            heartbeat.cancel()
            self.current, self.job_shutdown = None, None
            current_job.reset(token)
        await self._prune()  # once the job is recorded, its lease no longer renewed

    async def _prune(self) -> None:
        """Old finished jobs deleted, at most once per PRUNE_EVERY seconds: a failure is one warning, and waits
        for the next time (the job and the runner go on)."""
        if self._pruned_at is not None and time.monotonic() - self._pruned_at < PRUNE_EVERY:
            return
        self._pruned_at = time.monotonic()
        try:
            deleted = await self.store.prune(self.settings.service.keep_jobs_days, self.settings.service.keep_jobs)
        except Exception as exc:
            log.warning("could not delete old jobs: %s: %s", type(exc).__name__, clip(_reason(exc)))
            return
        if deleted:
            log.info("deleted %d old finished jobs (service.keep_jobs_days, service.keep_jobs)", deleted)

    async def _record(self, job_id: str, state: str, results: list[ReleaseResult], error: str | None) -> bool:
        """The job's outcome, with the files it wrote beside its values; False when its lease was lost."""
        return await self.store.finish(job_id, self.owner, state, job_record(results), error, job_files(results))

    async def _run(self, job: dict[str, Any], shutdown: Shutdown) -> None:
        started = time.monotonic()
        results: list[ReleaseResult] = []
        error: str | None = None
        stopped: str | None = None  # why it ended unfinished for no fault of its own, to be given back
        try:
            log.info("job started: %s", ", ".join(job["versions"]) if job["versions"] else "discovery")
            results = await self._sync(job, shutdown)
        except MirrorError as exc:  # the job's input, a source, a login, a lock, the output: one line
            error = str(exc)
            stopped = _given_back_why(exc, shutdown, job["attempts"] < self.settings.service.max_attempts)
        except Exception as exc:  # a bug: record it on the job and keep serving
            log.exception("job crashed")
            error = f"internal error: {type(exc).__name__}: {exc}"
        except asyncio.CancelledError:  # cut at shutdown past its grace: back to the queue, its attempt too
            if self.stopping:
                await asyncio.shield(self._give_back(job["id"], SHUTTING_DOWN))
            raise
        try:
            failures = [line for r in results for line in r.failures()]
            if shutdown.stopping and failures and not error:
                stopped = SHUTTING_DOWN
            if stopped is not None:  # cut short: this replica or another finishes it
                await self._give_back(job["id"], stopped, results)
                return
            ok = not failures and not error
            error = clip(error or "; ".join(failures), MAX_ERROR_CHARS) if error or failures else None
            state = SUCCEEDED if ok else FAILED
            recorded = await self._record(job["id"], state, results, error)
        except Exception as exc:
            if database.unavailable(exc):  # waited out: the lease runs out and the job is run again
                reason = clip(database.driver_reason(exc))
                log.error("could not record the job's outcome (%s); it will run again when its lease expires", reason)
                return
            log.exception("could not record the job's outcome")  # a bug, the same on every run: fail the job
            ok, results, error = False, [], internal_error(exc)
            try:
                recorded = await self.store.finish(job["id"], self.owner, FAILED, [], error)
            except Exception as again:  # the lease runs out and the job is run again (at most max_attempts)
                log.error("could not record the job as failed either (%s)", clip(database.driver_reason(again)))
                return
        if not recorded:
            log.error("job finished after its lease was lost to another replica; its outcome was not recorded")
            return
        self.metrics.observe(results, time.monotonic() - started, ok, time.time())
        self._announce(job, results, None if results else error)
        if ok:
            log.info("job succeeded")
        else:
            log.error("job failed: %s", error)

    async def _sync(self, job: dict[str, Any], shutdown: Shutdown) -> list[ReleaseResult]:
        """The job's run through the engine, its registry clients telling the metrics each retryable answer."""
        options = SyncOptions()
        async with Clients(self.settings, self.metrics.count_retry_status) as clients:
            if job["versions"] is None:
                return await discover_and_sync(self.settings, options, Progress(), shutdown, clients)
            return await sync(self.settings, job["versions"], options, Progress(), shutdown, clients)

    async def _owe(self, results: list[ReleaseResult]) -> None:
        """A cut job's copies whose values it did not write: owed an announcement by whichever job writes them."""
        from mirror.notify.announce import note_owed
        from mirror.notify.ledger import owed_by

        if self.settings.notify.channels:
            await note_owed(self.store, owed_by(results))

    async def _give_back(self, job_id: str, why: str, results: list[ReleaseResult] | None = None) -> None:
        """An unfinished job back to the queue (what it copied and did not deliver owed an announcement). Cut by a
        shutdown, its attempt is given back too; cut by a target lock (lost, waited for too long, its database
        away), it counts (`_given_back_why` fails it on its last)."""
        await self._owe(results or [])
        try:
            left = await self.store.release(job_id, self.owner, why, refund=why == SHUTTING_DOWN)
            if left == QUEUED:
                log.warning("job %s given back to the queue unfinished: cut short %s", job_id, why)
            elif left == FAILED:
                log.warning("job %s ended unfinished: cut short %s; its follow-up job runs", job_id, why)
        except Exception as exc:  # the database is away: the lease runs out and another replica takes it
            log.error("could not give job %s back (%s); it runs again when its lease expires", job_id, clip(str(exc)))

    def _gave_up(self, job: dict[str, Any]) -> None:
        """A job the store failed for this replica's claim: its lease ran out `max_attempts` times."""
        token = current_job.set(job["id"])
        try:
            log.error("job failed: %s", job["error"])
        finally:
            current_job.reset(token)
        self.metrics.observe_given_up()
        self._announce(job, [], job["error"])

    def _announce(self, job: dict[str, Any], results: list[ReleaseResult], error: str | None) -> None:
        """The job's news to the notify channels, in the background: sent once per job, by the replica that
        recorded its outcome, and never holding up the next job; what it owes an announcement, or settles, in the
        store's ledger (`mirror.notify.ledger`), shared by the replicas."""
        if not self.settings.notify.channels:
            return
        from mirror.notify.announce import announce
        from mirror.notify.events import stopped

        public = self.settings.notify.public_url
        links = job_links(public, job["id"]) if public else None
        page = links.page if links else None
        failed = [stopped(job.get("versions"), f"job {job['id']}", "mirror serve", str(error), page)] if error else []
        telling = announce(self.settings.notify, self.store, results, links, failed)
        task: asyncio.Task[object] = asyncio.ensure_future(telling)
        self._announcing.add(task)
        task.add_done_callback(self._announcing.discard)

    async def _heartbeat(self, job_id: str, shutdown: Shutdown) -> None:
        """Renew the lease at a third of its length. A lease found lost means another replica has the job:
        stop this copy of it at the next safe point."""
        while True:
            await asyncio.sleep(self.lease / 3)
            try:
                held = await self.store.renew(job_id, self.owner, self.lease)
            except Exception as exc:  # the database is away: keep working, try again next beat
                log.warning("lease renewal failed: %s", clip(str(exc)))
                continue
            if not held:
                log.error("lost the lease on job %s; stopping this copy of it", job_id)
                shutdown.request(0, "lease lost")
                return


def job_links(public: str, job_id: str) -> JobLinks:
    """A job's links in its messages: people land on its card on the status page (the job API's JSON, or a values
    download that answers a browser without the page's session with a JSON 401, is no place for them); programs
    reading the generic webhook get each values file's download, which the bearer token opens."""
    from mirror.notify.events import JobLinks
    from mirror.service import page

    def values(version: str, target: str, chart: str) -> str:
        return public + page.values_url(job_id, version, target, chart)

    return JobLinks(public + page.job_url(job_id), values)


def _given_back_why(exc: MirrorError, shutdown: Shutdown, attempts_left: bool) -> str | None:
    """Why a job that raised goes back to the queue rather than failing: the replica stopped it (while it waited
    for its target's lock); or, with attempts left, its target lock was lost (another run may hold it now; the
    job's next run waits for it), another run held it past `lock_timeout` (a cold copy by the CronJob or another
    replica), or the database holding the locks was out of reach for a moment: a queued job is claimed whatever
    its count, so the last attempt fails it. None for a failure of the job's own (a `lock_dir` it cannot use)."""
    if isinstance(exc, Interrupted):
        return SHUTTING_DOWN if shutdown.stopping else None
    if isinstance(exc, LockLost):
        why: str | None = LOST_LOCK
    elif isinstance(exc, LockUnavailable):
        why = LOCKS_AWAY
    elif isinstance(exc, LockTimeout) and not isinstance(exc, LockDirUnusable):
        why = LOCK_WAIT
    else:
        why = None
    return why if attempts_left else None
