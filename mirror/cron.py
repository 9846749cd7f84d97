"""A schedule as cron reads it, for APScheduler. Two differences would otherwise shift a schedule copied from
a crontab or a Kubernetes CronJob: APScheduler numbers weekdays from Monday (cron: 0 and 7 are Sunday), and
it fires only when the day of the month and the weekday both match (cron: either, when both are restricted).
Weekdays are therefore spelled out by name here, and a day plus a weekday becomes two triggers, either firing.

APScheduler is imported when a trigger is built: only configs with a schedule pay for it."""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from typing import TYPE_CHECKING

from mirror.untrusted import is_number

if TYPE_CHECKING:
    from apscheduler.triggers.base import BaseTrigger

FIELDS = ("second", "minute", "hour", "day", "month", "day_of_week")
WEEKDAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")  # cron's numbers: 0 (and 7) is Sunday


class CronError(ValueError):
    """The expression is not cron; the message names the field and why."""


def cron_trigger(expression: str) -> BaseTrigger:
    """5 fields (minute hour day month weekday) with cron's meaning, or 6 with seconds first; UTC."""
    from apscheduler.triggers.combining import OrTrigger
    from apscheduler.triggers.cron import CronTrigger

    fields = dict(zip(FIELDS, _six_fields(expression), strict=True))
    weekday_restricted = not fields["day_of_week"].startswith("*")
    for name, value in fields.items():
        try:
            if name == "day_of_week":
                fields[name] = weekday_names(value)
            else:
                CronTrigger(**{name: value}, timezone="UTC")
        except ValueError as exc:
            raise CronError(f"{name} field {value!r}: {exc}") from None
    if fields["day"].startswith("*") or not weekday_restricted:
        return CronTrigger(**fields, timezone="UTC")
    by_day = CronTrigger(**{**fields, "day_of_week": "*"}, timezone="UTC")
    by_weekday = CronTrigger(**{**fields, "day": "*"}, timezone="UTC")
    return OrTrigger([by_day, by_weekday])


def fire_times(trigger: BaseTrigger, since: datetime.datetime) -> Iterator[datetime.datetime]:
    """The trigger's fire times from `since` on, in order (as many as the caller takes)."""
    moment = trigger.get_next_fire_time(None, since)
    while moment is not None:
        yield moment
        moment = trigger.get_next_fire_time(moment, moment + datetime.timedelta(seconds=1))


def weekday_names(field: str) -> str:
    """cron's weekday field as APScheduler's names: `1-5` -> `mon,tue,wed,thu,fri`, `0,7` -> `sun`; a field
    starting with `*` is unrestricted for the day-or-weekday rule, as in cron, so `*` stays `*`."""
    if field == "*":
        return "*"
    days: set[int] = set()
    for item in field.split(","):
        base, _, step = item.partition("/")
        first, last = _weekday_range(base, stepped=bool(step))
        every = _number(step, "step") if step else 1
        if every < 1:
            raise CronError(f"step {step!r} is below 1")
        days.update(day % 7 for day in range(first, last + 1, every))
    return ",".join(WEEKDAYS[day] for day in sorted(days))


def _weekday_range(base: str, stepped: bool) -> tuple[int, int]:
    if base == "*":
        return 0, 6
    low, dash, high = base.partition("-")
    first = _weekday(low)
    # `1/2` steps to Saturday, as a Kubernetes CronJob reads it (weekdays 0-6 there): Monday, Wednesday, Friday
    last = _weekday(high) if dash else 6 if stepped else first
    if last < first:
        raise CronError(f"range {base!r} runs backwards")
    return first, last


def _weekday(text: str) -> int:
    name = text.lower()
    if name in WEEKDAYS:
        return WEEKDAYS.index(name)
    day = _number(text, "weekday")
    if not 0 <= day <= 7:
        raise CronError(f"weekday {text!r} is not 0-7 (0 and 7 are Sunday) or sun-sat")
    return day


def _number(text: str, what: str) -> int:
    if not is_number(text):
        raise CronError(f"{what} {text!r} is not a number")
    return int(text)


def _six_fields(expression: str) -> list[str]:
    fields = expression.split()
    if len(fields) not in (5, 6):
        raise CronError("a cron expression has 5 fields (or 6, with seconds first)")
    return ["0", *fields] if len(fields) == 5 else fields
