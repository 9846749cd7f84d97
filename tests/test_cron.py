"""The service's schedule means what the same line means in a crontab or a Kubernetes CronJob: Sunday is 0
(and 7), and a day of the month with a weekday fires on either. APScheduler's own reading differs in both."""

from __future__ import annotations

import datetime

import pytest

from mirror.cron import CronError, cron_trigger
from mirror.settings.root import check_cron

START = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)  # a Thursday


def fires(expression: str, days: int = 56) -> list[datetime.datetime]:
    trigger = cron_trigger(expression)
    times: list[datetime.datetime] = []
    moment: datetime.datetime | None = START - datetime.timedelta(seconds=1)
    while moment is not None and moment < START + datetime.timedelta(days=days):
        moment = trigger.get_next_fire_time(None, moment + datetime.timedelta(seconds=1))
        if moment is not None and moment < START + datetime.timedelta(days=days):
            times.append(moment)
    return times


def weekdays(expression: str) -> set[str]:
    return {moment.strftime("%a") for moment in fires(expression)}


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("0 3 * * 1", {"Mon"}),
        ("0 3 * * 0", {"Sun"}),
        ("0 3 * * 7", {"Sun"}),
        ("0 3 * * 1-5", {"Mon", "Tue", "Wed", "Thu", "Fri"}),
        ("0 3 * * 5-7", {"Fri", "Sat", "Sun"}),
        ("0 3 * * */2", {"Sun", "Tue", "Thu", "Sat"}),
        ("0 3 * * 1-5/2", {"Mon", "Wed", "Fri"}),
        ("0 3 * * 1/2", {"Mon", "Wed", "Fri"}),  # not Sunday: a CronJob steps over 0-6
        ("0 3 * * 0/3", {"Sun", "Wed", "Sat"}),
        ("0 3 * * sat,SUN", {"Sat", "Sun"}),
        ("0 3 * * mon-fri", {"Mon", "Tue", "Wed", "Thu", "Fri"}),
        ("0 0 3 * * 1", {"Mon"}),  # six fields, seconds first
    ],
)
def test_weekdays_are_counted_from_sunday_as_cron_counts_them(expression: str, expected: set[str]) -> None:
    assert weekdays(expression) == expected
    assert all(moment.hour == 3 and moment.minute == 0 for moment in fires(expression))


def test_a_day_and_a_weekday_fire_on_either() -> None:
    times = fires("0 0 1 * mon", days=59)  # January and February 2026: 1 Jan is a Thursday, 1 Feb a Sunday
    assert {t.date() for t in times} == {
        *(datetime.date(2026, 1, day) for day in (1, 5, 12, 19, 26)),
        *(datetime.date(2026, 2, day) for day in (1, 2, 9, 16, 23)),
    }


def test_an_unrestricted_weekday_leaves_the_day_alone() -> None:
    assert {t.date() for t in fires("30 6 15 * *", days=59)} == {datetime.date(2026, 1, 15), datetime.date(2026, 2, 15)}


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("0 3 * * 8", "day_of_week field '8': weekday '8' is not 0-7"),
        ("0 3 * * 5-1", "day_of_week field '5-1': range '5-1' runs backwards"),
        ("0 3 * * x", "day_of_week field 'x'"),
        ("0 3 * * */0", "day_of_week field '*/0': step '0' is below 1"),
        ("0 24 * * *", "hour field '24'"),
        ("0 0 * *", "a cron expression has 5 fields"),
    ],
)
def test_what_is_not_cron_is_refused_naming_the_field(expression: str, message: str) -> None:
    with pytest.raises(CronError, match="^" + message.replace("*", r"\*")):
        cron_trigger(expression)


def test_the_config_reads_the_schedule_as_the_scheduler_does() -> None:
    check_cron("0 3 * * 7")  # APScheduler's own parser refuses 7
    with pytest.raises(ValueError, match=r"^'0 3 \* \* 8': day_of_week field '8'"):
        check_cron("0 3 * * 8")


@pytest.mark.parametrize(
    ("expression", "late", "expected"),
    [
        ("0 */6 * * *", 0.0, "schedule:2026-01-01T06:00:00Z"),
        ("0 */6 * * *", 3.7, "schedule:2026-01-01T06:00:00Z"),  # a replica whose tick ran later: the same tick
        ("*/2 * * * * *", 0.0, "schedule:2026-01-01T06:00:00Z"),
        ("*/2 * * * * *", 1.9, "schedule:2026-01-01T06:00:00Z"),
        ("*/2 * * * * *", 2.0, "schedule:2026-01-01T06:00:02Z"),  # the next tick
        ("0 0 * * sun", 0.0, None),  # nothing fired within the misfire grace
    ],
)
def test_each_tick_is_named_by_its_fire_time(expression: str, late: float, expected: str | None) -> None:
    """Every replica runs the schedule: a tick's delivery id, the same wherever it runs, makes their ticks one job."""
    from mirror.service.scheduler import tick_delivery

    six = START + datetime.timedelta(hours=6)
    assert tick_delivery(cron_trigger(expression), six + datetime.timedelta(seconds=late)) == expected
