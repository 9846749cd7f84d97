"""Docker Hub's pull budget: manifest GETs are counted pulls, HEADs are not. When the announced
`ratelimit-remaining` is at the floor (or a 429 says it is gone), GETs wait, re-reading the budget with
HEADs, until it allows them again or the maximum wait is spent."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from mirror.errors import Kind, MirrorError
from mirror.registry.ratelimit import RateLimit

log = logging.getLogger("mirror")


class BudgetExhausted(MirrorError):
    """Docker Hub's pull budget stayed spent for longer than the run may wait."""

    kind = Kind.UNAVAILABLE


class PullBudget:
    def __init__(self, floor: int, max_wait: float, poll_interval: float) -> None:
        self.floor = floor
        self.max_wait = max_wait
        self.poll_interval = poll_interval
        self.known: RateLimit | None = None  # the latest budget the registry announced
        self._lock = asyncio.Lock()

    def note(self, budget: RateLimit) -> None:
        self.known = budget

    def spent(self) -> None:
        """A 429 TOOMANYREQUESTS from a registry that announces a budget: whatever it said, nothing is left."""
        known = self.known
        self.known = RateLimit(0, known.limit if known else None, known.window_seconds if known else None)

    def allows_pull(self) -> bool:
        return self.known is None or self.known.remaining > self.floor

    async def wait_for_pull(self, where: str, refresh: Callable[[], Awaitable[object]]) -> None:
        """Return when a pull is allowed; raise BudgetExhausted after `max_wait` seconds of waiting."""
        if self.allows_pull():
            return
        started = time.monotonic()  # before the lock: a waiter queued behind the one polling shares its wait
        async with self._lock:  # one waiter polls; the others find the budget refreshed
            while not self.allows_pull():
                waited = time.monotonic() - started
                if waited + self.poll_interval > self.max_wait:
                    raise BudgetExhausted(
                        f"fetch manifest {where}: pull budget exhausted ({self.known}); waited {waited:.0f} s "
                        f"of pull_budget.max_wait {self.max_wait:.0f} s"
                    )
                log.warning(
                    "%s: pull budget at %s; pausing manifest GETs for %.0f s", where, self.known, self.poll_interval
                )
                await asyncio.sleep(self.poll_interval)
                await refresh()
