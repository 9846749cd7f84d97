"""A run's news told to the on-call channels, with the ledger of releases owed an announcement (`ledger.py`): the
one way the CLI and the service announce a run."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from mirror.database import driver_reason
from mirror.notify.events import Event, JobLinks, events_of
from mirror.notify.ledger import Ledger, delivered, owed_by
from mirror.notify.send import notify
from mirror.report import ReleaseResult
from mirror.settings import NotifySettings

log = logging.getLogger("mirror")


async def announce(
    settings: NotifySettings,
    ledger: Ledger | None,
    results: list[ReleaseResult],
    job: JobLinks | None = None,
    more: Sequence[Event] = (),
) -> None:
    """Post the run's events (and `more`): what the ledger owed and the run delivered announced too; what the run
    copied and did not deliver left owed, and what was settled but no channel heard owed again. A ledger out of
    reach (None, or its database away) is one warning: the events are those of a run without one. Never raises."""
    settled: set[str] = set()
    try:
        settled = await ledger.settle(delivered(results)) if ledger is not None else set()
    except Exception as exc:
        reason = driver_reason(exc)
        log.warning("announcements owed not read (%s): only releases copied in this run are announced", reason)
        ledger = None
    events = [*events_of(results, job, settled), *more]
    sent = await notify(settings, events) if events else []
    if ledger is None:
        return
    owed = owed_by(results)
    wanted = any("mirrored" in channel.events for channel in settings.channels)
    if settled and wanted and not any(each.event == "mirrored" and each.error is None for each in sent):
        owed |= settled  # nobody heard it: a later run's delivery tells it
    await note_owed(ledger, owed)


async def note_owed(ledger: Ledger, owed: set[str]) -> None:
    """`owed` kept in the ledger; a ledger out of reach is one warning."""
    try:
        await ledger.owe(owed) if owed else None
    except Exception as exc:
        log.warning("announcements owed not kept (%s): a release may go unannounced", driver_reason(exc))
