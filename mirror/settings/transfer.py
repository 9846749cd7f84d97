"""How a copy moves bytes: concurrency, timeouts and bounds; the spool for several targets; retries; Docker
Hub's pull budget."""

# No `from __future__ import annotations` in a module of models: pydantic would compile each field's annotation
# from its string at import, a tenth of the config's import time.
from pathlib import Path
from typing import Self

from pydantic import Field, model_validator

from mirror.settings.fields import Section


class TransferSettings(Section):
    # blob transfers at once to each target registry (each region has a link of its own), and across the whole
    # run (each transfer holds a few MB of buffers)
    blob_concurrency: int = Field(default=6, ge=1, le=64)
    run_blob_concurrency: int = Field(default=8, ge=1, le=256)
    manifest_concurrency: int = Field(default=8, ge=1, le=64)
    chunk_size: int = Field(default=1024 * 1024, ge=64 * 1024, le=64 * 1024 * 1024)  # read buffer
    chunked_upload_threshold: int = Field(default=64 * 1024 * 1024, ge=64 * 1024)  # larger blobs go in PATCHes
    upload_chunk_size: int = Field(default=16 * 1024 * 1024, ge=64 * 1024, le=1024 * 1024 * 1024)
    connect_timeout: float = Field(default=10.0, gt=0, le=600)
    read_timeout: float = Field(default=120.0, gt=0, le=3600)  # the longest wait for the next bytes
    # the whole of one request, its retries and its body included (a manifest, a token, a chart index): a peer
    # that trickles a byte per read timeout cannot hold a run longer; a blob gets this plus its size at min_rate
    deadline: float = Field(default=300.0, gt=0, le=86400)
    min_rate: int = Field(default=64 * 1024, ge=1024)  # bytes per second a blob read may average, at the least
    max_blob_size: int = Field(default=50 * 1024**3, ge=1024)  # a descriptor claiming more is refused unread

    @model_validator(mode="after")
    def _run_takes_a_registry(self) -> Self:
        if self.run_blob_concurrency < self.blob_concurrency:
            raise ValueError(
                f"run_blob_concurrency ({self.run_blob_concurrency}) must be at least blob_concurrency "
                f"({self.blob_concurrency}): the run's bound takes in every target's"
            )
        return self


class SpoolSettings(Section):
    """Where blobs going to several targets are spooled, so the source is read once."""

    dir: Path | None = None  # default: the system temp directory
    max_bytes: int = Field(default=4 * 1024**3, ge=0)  # blobs that do not fit are streamed per target


class RetrySettings(Section):
    """Retries of transient failures: exponential backoff with jitter, capped in count and total time."""

    attempts: int = Field(default=5, ge=1, le=100)
    base_delay: float = Field(default=0.5, ge=0, le=3600)
    max_delay: float = Field(default=30.0, ge=0, le=3600)
    max_elapsed: float = Field(default=300.0, gt=0, le=86400)


class BudgetSettings(Section):
    """Docker Hub's pull budget: manifest GETs pause when `ratelimit-remaining` reaches `floor`."""

    floor: int = Field(default=2, ge=0)
    max_wait: float = Field(default=900.0, ge=0, le=86400)
    poll_interval: float = Field(default=60.0, gt=0, le=3600)
