"""The schedule: APScheduler queues a discovery job on the configured cron expression. Coalesced, at most
one instance, and the queue itself refuses a second discovery while one is queued or running."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.triggers.cron import CronTrigger

log = logging.getLogger("mirror.service")


def cron_trigger(expression: str) -> CronTrigger:
    """5 fields (minute hour day month weekday), or 6 with seconds first."""
    fields = expression.split()
    if len(fields) == 5:
        return CronTrigger.from_crontab(expression, timezone="UTC")
    second, minute, hour, day, month, weekday = fields
    return CronTrigger(
        second=second, minute=minute, hour=hour, day=day, month=month, day_of_week=weekday, timezone="UTC"
    )


def start_scheduler(expression: str, enqueue: Callable[[], Awaitable[None]]) -> AsyncIOScheduler:
    scheduler = AsyncIOScheduler(timezone="UTC")
    scheduler.add_job(
        enqueue, cron_trigger(expression), id="discovery", coalesce=True, max_instances=1, misfire_grace_time=60
    )
    scheduler.start()
    log.info("discovery scheduled: %s (UTC)", expression)
    return scheduler
