"""Runs queued jobs one at a time with the sync engine, and records what happened."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from mirror.engine.lock import LockTimeout
from mirror.engine.shutdown import Shutdown
from mirror.engine.sync import SyncOptions, discover_and_sync, sync
from mirror.progress import Progress
from mirror.report import ReleaseResult
from mirror.service.logs import current_job
from mirror.service.metrics import Metrics
from mirror.service.store import FAILED, SUCCEEDED, JobStore
from mirror.settings import MirrorSettings

log = logging.getLogger("mirror.service")


class JobRunner:
    def __init__(self, settings: MirrorSettings, store: JobStore, metrics: Metrics) -> None:
        self.settings = settings
        self.store = store
        self.metrics = metrics
        self.wake = asyncio.Event()
        self.shutdown = Shutdown()
        self.current: str | None = None
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop())

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def stop(self, grace: float) -> None:
        """Start no new job; let the running one reach a safe point within `grace` seconds."""
        if self._task is None:
            return
        self.shutdown.request(grace, "shutdown")
        self.wake.set()
        try:
            await asyncio.wait_for(asyncio.shield(self._task), grace + 5)
        except TimeoutError:
            self._task.cancel()

    async def _loop(self) -> None:
        requeued = await self.store.requeue_interrupted()
        if requeued:
            log.warning("queued again %d job(s) interrupted by a restart", requeued)
        while not self.shutdown.stopping:
            job = await self.store.claim_next()
            if job is None:
                self.wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.wake.wait(), 1.0)
                continue
            await self.run(job)

    async def run(self, job: dict[str, Any]) -> None:
        token = current_job.set(job["id"])
        self.current = job["id"]
        started = time.monotonic()
        results: list[ReleaseResult] = []
        error: str | None = None
        try:
            log.info("job started: %s", ", ".join(job["versions"]) if job["versions"] else "discovery")
            options = SyncOptions()
            if job["versions"] is None:
                results = await discover_and_sync(self.settings, options, Progress(), self.shutdown)
            else:
                results = await sync(self.settings, job["versions"], options, Progress(), self.shutdown)
        except (ValueError, LockTimeout) as exc:  # bad versions, config, a lock held too long
            error = str(exc)
        except Exception as exc:  # a bug: record it on the job and keep serving
            log.exception("job crashed")
            error = f"internal error: {type(exc).__name__}: {exc}"
        failures = [line for r in results for line in r.failures()]
        if self.shutdown.stopping and not error:
            error = "stopped by shutdown before the job finished"
        ok = not failures and not error
        error = error or ("; ".join(failures) if failures else None)
        await self.store.finish(job["id"], SUCCEEDED if ok else FAILED, [r.to_json() for r in results], error)
        self.metrics.observe(results, time.monotonic() - started, ok, time.time())
        log.info("job %s", "succeeded" if ok else f"failed: {error}")
        self.current = None
        current_job.reset(token)
