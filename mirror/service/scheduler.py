"""The schedule: APScheduler queues a discovery job on the configured cron expression. Coalesced, at most
one instance, and the queue itself refuses a second discovery while one is queued (one follow-up while one runs).
Every replica runs this schedule; each tick is queued under a delivery id naming its fire time, so the replicas'
ticks of one moment make one job (without it, a replica whose tick came after another's job was claimed queued a
follow-up: discovery ran twice, and its failures and drift were announced twice)."""

from __future__ import annotations

import asyncio
import datetime
import logging
from collections.abc import Awaitable, Callable

from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.triggers.base import BaseTrigger

from mirror.cron import cron_trigger, fire_times

log = logging.getLogger("mirror.service")
MISFIRE_GRACE_SECONDS = 60  # a tick run later than this after its time is skipped
CATCH_UP_SECONDS = 24 * 3600.0  # a replica starting queues the latest tick within this, if no job answers it


def start_scheduler(expression: str, enqueue: Callable[[str | None], Awaitable[None]]) -> AsyncIOScheduler:
    """`enqueue` is called on each tick with the tick's delivery id."""
    trigger = cron_trigger(expression)

    async def tick() -> None:
        delivery = tick_delivery(trigger, datetime.datetime.now(datetime.UTC))
        try:
            await enqueue(delivery)
        except asyncio.CancelledError:  # the service stopping while the tick waits for the job store: one line,
            log.warning("scheduled discovery %s not queued: the service stopped first", delivery)  # no traceback

    scheduler = AsyncIOScheduler(timezone="UTC")
    scheduler.add_job(
        tick, trigger, id="discovery", coalesce=True, max_instances=1, misfire_grace_time=MISFIRE_GRACE_SECONDS
    )
    scheduler.start()
    log.info("discovery scheduled: %s (UTC)", expression)
    return scheduler


def tick_delivery(trigger: BaseTrigger, now: datetime.datetime, within: float = MISFIRE_GRACE_SECONDS) -> str | None:
    """`schedule:<fire time>` for the tick running at `now`: the trigger's latest fire time at or before it (the
    same on every replica whose clock agrees to within the schedule's period); None when none is `within` seconds
    before it (the misfire grace)."""
    latest = None
    for moment in fire_times(trigger, now - datetime.timedelta(seconds=within)):
        if moment > now:
            break
        latest = moment
    return f"schedule:{latest.astimezone(datetime.UTC):%Y-%m-%dT%H:%M:%SZ}" if latest is not None else None


def missed_tick(expression: str, now: datetime.datetime) -> str | None:
    """The delivery of the schedule's latest tick within a day before `now`, which a replica starting now may have
    missed (a restart or a rollout across it: APScheduler, in memory, knows no tick before it started). Looked for
    in widening windows, so a schedule of every few seconds is not stepped through for a whole day."""
    trigger = cron_trigger(expression)
    for window in (MISFIRE_GRACE_SECONDS, 3600.0, CATCH_UP_SECONDS):
        found = tick_delivery(trigger, now, window)
        if found is not None:
            return found
    return None
