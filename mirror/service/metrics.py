"""Prometheus metrics of the service: syncs, bytes, blobs, durations, 429s, Docker Hub's budget, jobs given
up, and the last success per image and target. The 429s are told by the runs' registry clients
(`count_retry_status`, the observer the runner gives each run), not read from a global."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from mirror.report import ReleaseResult


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.syncs = Counter("mirror_syncs", "sync jobs by result", ["result"], registry=r)
        self.bytes = Counter("mirror_bytes_copied", "blob bytes uploaded to targets", registry=r)
        self.blobs = Counter("mirror_blobs", "blobs by outcome", ["outcome"], registry=r)
        self.duration = Histogram(
            "mirror_sync_duration_seconds", "sync job duration", registry=r, buckets=(1, 5, 15, 60, 300, 900, 3600)
        )
        self.pulls_remaining = Gauge("mirror_dockerhub_pulls_remaining", "Docker Hub pull budget left", registry=r)
        self.last_success = Gauge(
            "mirror_last_success_timestamp_seconds", "last verified copy", ["image", "target"], registry=r
        )
        self.rate_limited = Counter("mirror_rate_limited_responses", "429 answers seen from registries", registry=r)
        self.given_up = Counter(
            "mirror_jobs_given_up", "jobs failed because their lease ran out service.max_attempts times", registry=r
        )

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
        for release in results:
            if release.source_rate_limit is not None:
                self.pulls_remaining.set(release.source_rate_limit.remaining)
            for image in release.images:
                for target in image.targets:
                    self.bytes.inc(target.bytes_uploaded)
                    for outcome, count in target.blobs.items():
                        self.blobs.labels(outcome).inc(count)
                    if target.verified:
                        self.last_success.labels(image.name, target.target).set(now)

    def render(self) -> bytes:
        return generate_latest(self.registry)
