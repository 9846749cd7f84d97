"""Stopping a run on SIGTERM or Ctrl-C: no new blob transfers start; those in flight get a grace period, then are
abandoned (at once on a second Ctrl-C). Either way no tag is pushed for an image that did not complete."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from mirror.errors import Kind, MirrorError

log = logging.getLogger("mirror")

STOPPING = "not started: the run is shutting down"
SIGTERM = "SIGTERM"  # the reasons `mirror sync`'s signal handlers give (exit 143 and 130 say them)
SIGINT = "SIGINT"


class Interrupted(MirrorError):
    """Work refused or abandoned because the run is shutting down."""

    kind = Kind.INTERRUPTED


class Shutdown:
    def __init__(self) -> None:
        self.stopping = False
        self.reason: str | None = None  # what asked first: "SIGTERM", a lost lock, the service's shutdown
        self.abandoned = False
        self._on_abandon: list[Callable[[], None]] = []

    def on_abandon(self, callback: Callable[[], None]) -> None:
        """Have `callback` called when the grace period ends (at once, if it has already)."""
        self._on_abandon.append(callback)
        if self.abandoned:
            callback()

    def check(self) -> None:
        if self.stopping:
            raise Interrupted(STOPPING)

    @property
    def signalled(self) -> bool:
        """Whether a signal stopped the run (its exit code says which), not a lost lock or the service."""
        return self.reason in (SIGTERM, SIGINT)

    def request(self, grace: float, reason: str = SIGTERM, hint: str = "") -> None:
        """Stop starting work now; abandon what is in flight after `grace` seconds."""
        if self.stopping:
            return
        self.stopping, self.reason = True, reason
        log.warning("%s: finishing in-flight uploads for up to %g s, starting nothing new%s", reason, grace, hint)
        asyncio.get_running_loop().call_later(grace, self.abandon)

    def abandon(self) -> None:
        if self.abandoned:
            return
        self.abandoned = True
        log.warning("grace period over: abandoning in-flight uploads")
        for callback in self._on_abandon:
            callback()

    @contextmanager
    def abandoned_as_interrupted(self, what: str) -> Iterator[None]:
        """Abandoning the run cancels the look-ups its images share (trees, referrers, a target's HEADs); each
        image waiting on one gets a CancelledError that was not meant for its own task. Raised here as
        Interrupted, it fails that image like any error, where it would have ended the run with a traceback."""
        try:
            yield
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if self.abandoned and task is not None and task.cancelling() == 0:
                raise Interrupted(f"{what}: abandoned at shutdown") from None
            raise

    @contextmanager
    def interrupted_when_abandoned(self, what: str) -> Iterator[None]:
        """The current task cancelled when the grace period ends, raised as Interrupted: for what runs before any
        upload (a chart's fetch, discovery, a namespace's look-up), which would otherwise go on retrying to its
        deadline, past the grace a pod is given before it is killed."""
        task = asyncio.current_task()
        assert task is not None
        inside = [True]

        def cancel() -> None:
            if inside[0]:
                task.cancel()

        self.on_abandon(cancel)
        try:
            yield
        except asyncio.CancelledError:
            if self.abandoned and task.uncancel() == 0:
                raise Interrupted(f"{what}: abandoned at shutdown") from None
            raise
        finally:
            inside[0] = False
