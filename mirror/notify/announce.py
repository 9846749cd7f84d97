"""A run's news told to the on-call channels, with the ledger of what they were told (`ledger.py`): the one way
the CLI and the service announce a run."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from mirror.notify.events import Event, JobLinks, events_of
from mirror.notify.ledger import Ledger, delivered
from mirror.notify.send import notify
from mirror.report import ReleaseResult
from mirror.settings import NotifySettings
from mirror.untrusted import clip

log = logging.getLogger("mirror")


async def announce(
    settings: NotifySettings,
    ledger: Ledger | None,
    results: list[ReleaseResult],
    job: JobLinks | None = None,
    more: Sequence[Event] = (),
) -> None:
    """Post the run's events (and `more`), then note what it delivered. A ledger out of reach (None, or its
    database away) is one warning: the events are those of a run without one, and nothing is noted. Never
    raises."""
    told = None
    try:
        told = await ledger.told() if ledger is not None else None
    except Exception as exc:
        log.warning("on-call ledger not read (%s): only releases copied in this run are announced", why(exc))
        ledger = None
    events = [*events_of(results, job, told), *more]
    if events:
        await notify(settings, events)
    if ledger is not None:
        try:
            await ledger.note(delivered(results))
        except Exception as exc:
            log.warning("on-call ledger not written (%s): a later run may announce these releases again", why(exc))


def why(exc: BaseException) -> str:
    """An error's first line: a database's carries the driver's words, the lines after it the statement."""
    first = str(exc).splitlines()[0] if str(exc) else ""
    return clip(f"{type(exc).__name__}: {first}", 200)
