"""The schedule: APScheduler queues a discovery job on the configured cron expression. Coalesced, at most
one instance, and the queue itself refuses a second discovery while one is queued (one follow-up while one runs)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from apscheduler.schedulers.asyncio import AsyncIOScheduler

from mirror.cron import cron_trigger

log = logging.getLogger("mirror.service")


def start_scheduler(expression: str, enqueue: Callable[[], Awaitable[None]]) -> AsyncIOScheduler:
    scheduler = AsyncIOScheduler(timezone="UTC")
    scheduler.add_job(
        enqueue, cron_trigger(expression), id="discovery", coalesce=True, max_instances=1, misfire_grace_time=60
    )
    scheduler.start()
    log.info("discovery scheduled: %s (UTC)", expression)
    return scheduler
