"""Prometheus metrics of the service: syncs, bytes, blobs, durations, 429s, Docker Hub's budget, jobs given
up, the last success per image, target and tag and of any job (this process's, and the job store's, which every
replica shares), and drift per image, target and tag. The 429s are told by the runs' registry clients
(`count_retry_status`, the observer the runner gives each run), not read from a global. The alert rules and
the dashboard over these names are in deploy/monitoring/ (tests/test_monitoring.py checks that they use only
names rendered here)."""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from mirror.engine.blobs import BlobOutcome
from mirror.engine.outcomes import Drift
from mirror.reference import parse
from mirror.report import ReleaseResult, TargetResult

RESULTS = ("succeeded", "failed")
STORE_READ_SECONDS = 10.0  # /metrics, open to anyone, reads the job store at most this often
STORE_READ_DEADLINE = 5.0  # a scrape waits this long for the job store, then shows the last reading

log = logging.getLogger("mirror.service")


class Metrics:
    def __init__(self, now: float | None = None) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.syncs = Counter("mirror_syncs", "sync jobs by result", ["result"], registry=r)
        self.bytes = Counter("mirror_bytes_copied", "blob bytes uploaded to targets", registry=r)
        self.blobs = Counter("mirror_blobs", "blobs by outcome", ["outcome"], registry=r)
        self.duration = Histogram(
            "mirror_sync_duration_seconds", "sync job duration", registry=r, buckets=(1, 5, 15, 60, 300, 900, 3600)
        )
        self.pulls_remaining = Gauge(
            "mirror_dockerhub_pulls_remaining", "Docker Hub pull budget left (NaN until a job reads it)", registry=r
        )
        self.pulls_limit = Gauge(
            "mirror_dockerhub_pulls_limit", "Docker Hub pull budget per window (NaN while unknown)", registry=r
        )
        self.pulls_window = Gauge(
            "mirror_dockerhub_pulls_window_seconds", "Docker Hub pull budget's window (NaN while unknown)", registry=r
        )
        self.pulls_read = Gauge(
            "mirror_dockerhub_pulls_timestamp_seconds", "when a job last read Docker Hub's pull budget", registry=r
        )
        self.last_job_success = Gauge(
            "mirror_last_successful_job_timestamp_seconds",
            "when a job last succeeded in this process (0: none yet)",
            registry=r,
        )
        self.started = Gauge(
            "mirror_started_timestamp_seconds", "when this process's metrics began (the service started)", registry=r
        )
        self.last_success, self.drift, self.drift_seen = self._copy_gauges()
        self.rate_limited = Counter("mirror_rate_limited_responses", "429 answers seen from registries", registry=r)
        self.given_up = Counter(
            "mirror_jobs_given_up", "jobs failed because their lease ran out service.max_attempts times", registry=r
        )
        self._start(time.time() if now is None else now)

    def _copy_gauges(self) -> tuple[Gauge, Gauge, Gauge]:
        """The last verified copy and drift, by image, target and tag (the tag at the target): one image's releases
        are copied under their own tags, and one may drift while another verifies in the same job (by image and
        target alone, the last written hid the drift). One series per image, target and tag a job of this process
        has seen: the releases in the discovery window (and those entering it, or a webhook names, while the
        process runs), times images and targets; a restart forgets them."""
        labels, r = ["image", "target", "tag"], self.registry
        return (
            Gauge(
                "mirror_last_success_timestamp_seconds",
                "when a job last verified the copy of the image's tag at the target (per tag seen)",
                labels,
                registry=r,
            ),
            Gauge(
                "mirror_drift",
                "1 while the last job saw the target's tag point elsewhere (left alone), 0 once verified (per tag)",
                labels,
                registry=r,
            ),
            Gauge(
                "mirror_drift_timestamp_seconds",
                "when a job last saw the target's tag point elsewhere (per tag seen)",
                labels,
                registry=r,
            ),
        )

    def _start(self, now: float) -> None:
        """Every result and outcome exists from the start at 0, so that the first failure after a restart is an
        increase (a series born at 1 is not one to `increase()`; one failing before the first scrape is, to the
        alert, a failure of a replica younger than the hour), and a budget never read is not "0 left"."""
        self.store_success = Gauge(
            "mirror_store_last_successful_job_timestamp_seconds",
            "when the newest succeeded job in the job store (shared by every replica) finished (0: none)",
            registry=self.registry,
        )
        for result in RESULTS:
            self.syncs.labels(result)
        for outcome in BlobOutcome:
            self.blobs.labels(outcome.value)
        for unknown in (self.pulls_remaining, self.pulls_limit, self.pulls_window):
            unknown.set(math.nan)
        self.started.set(now)

    def count_retry_status(self, status: int) -> None:
        """A registry's retryable answer (the runs' observer): 429s are counted."""
        if status == 429:
            self.rate_limited.inc()

    def observe_given_up(self) -> None:
        self.syncs.labels("failed").inc()
        self.given_up.inc()

    def observe(self, results: list[ReleaseResult], seconds: float, ok: bool, now: float) -> None:
        self.syncs.labels("succeeded" if ok else "failed").inc()
        self.duration.observe(seconds)
        if ok:
            self.last_job_success.set(now)
        for release in results:
            if (budget := release.source_rate_limit) is not None:
                self.pulls_remaining.set(budget.remaining)
                self.pulls_limit.set(math.nan if budget.limit is None else budget.limit)
                self.pulls_window.set(math.nan if budget.window_seconds is None else budget.window_seconds)
                self.pulls_read.set(now)
            for image in release.images:
                for target in image.targets:
                    self._observe_copy(image.name, target, now)

    def _observe_copy(self, image: str, target: TargetResult, now: float) -> None:
        """One image at one target, under the tag it has there (the reference's: a pinned copy's own tag)."""
        self.bytes.inc(target.bytes_uploaded)
        for outcome, count in target.blobs.items():
            self.blobs.labels(outcome).inc(count)
        labels = (image, target.target, target_tag(target))
        if target.verified:
            self.last_success.labels(*labels).set(now)
            self.drift.labels(*labels).set(0)
        elif isinstance(target.outcome, Drift):
            self.drift.labels(*labels).set(1)
            self.drift_seen.labels(*labels).set(now)

    def render(self) -> bytes:
        return generate_latest(self.registry)


def target_tag(target: TargetResult) -> str:
    """The tag of a target's reference, as `reference.parse` reads it."""
    return parse(target.reference).identifier


class StoreSuccess:
    """`mirror_store_last_successful_job_timestamp_seconds`, read from the job store when /metrics is scraped:
    every replica tells the deployment's newest success, so a replica that restarted (or never ran a job) does
    not pull the alert's `max` back to its own start. Read at most every STORE_READ_SECONDS (scrapes in between
    are told the last reading) and within STORE_READ_DEADLINE; a store that cannot be read leaves the last
    reading, so the time since it goes on growing."""

    def __init__(self, metrics: Metrics, newest: Callable[[], Awaitable[float | None]]) -> None:
        self.gauge = metrics.store_success
        self.newest = newest
        self.read_at: float | None = None  # time.monotonic() of the last attempt
        self.reading = asyncio.Lock()

    async def refresh(self) -> None:
        async with self.reading:
            if self.read_at is not None and time.monotonic() - self.read_at < STORE_READ_SECONDS:
                return
            self.read_at = time.monotonic()
            try:
                newest = await asyncio.wait_for(self.newest(), STORE_READ_DEADLINE)
            except Exception as exc:  # the database is away: the last reading stays
                log.warning("metrics: could not read the last success from the job store: %s", type(exc).__name__)
                return
            self.gauge.set(newest if newest is not None else 0)
