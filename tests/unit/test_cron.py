"""A schedule's times (producer.schedules.cron): the seconds field, the time zone, the catch-up rule."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from producer.schedules.cron import CronError, timing


def ms(*dt: int) -> int:
    return int(datetime(*dt, tzinfo=UTC).timestamp() * 1000)  # type: ignore[misc]


def test_six_fields_put_the_seconds_first() -> None:
    start = ms(2026, 1, 5, 12, 0, 7)
    assert timing("*/15 * * * * *", "UTC").after(start, 3) == [
        ms(2026, 1, 5, 12, 0, 15), ms(2026, 1, 5, 12, 0, 30), ms(2026, 1, 5, 12, 0, 45),
    ]  # fmt: skip
    assert timing("0 9 * * *", "UTC").after(start, 1) == [ms(2026, 1, 6, 9)]


def test_the_cron_is_read_in_its_time_zone_across_daylight_saving() -> None:
    ny = timing("0 9 * * *", "America/New_York")
    assert ny.after(ms(2026, 1, 10), 1) == [ms(2026, 1, 10, 14)]  # EST: UTC-5
    assert ny.after(ms(2026, 7, 10), 1) == [ms(2026, 7, 10, 13)]  # EDT: UTC-4


@pytest.mark.parametrize(
    ("next_s", "now_s", "catchup", "fire_s", "skipped", "after_s"),
    [
        (10, 9, 5, [], 0, 10),  # not due yet
        (10, 10, 5, [10], 0, 11),  # due at this very second
        (10, 12, 5, [10, 11, 12], 0, 13),  # a late firer makes every one
        (10, 40, 3, [38, 39, 40], 28, 41),  # an outage: the latest three, the rest skipped
        (10, 40, 1, [40], 30, 41),
    ],
)
def test_the_catch_up_rule(
    next_s: int, now_s: int, catchup: int, fire_s: list[int], skipped: int, after_s: int
) -> None:
    base = ms(2026, 3, 1)
    due = timing("* * * * * *", "UTC").due(base + next_s * 1000, base + now_s * 1000 + 400, catchup)
    assert due.fire == [base + s * 1000 for s in fire_s]
    assert (due.skipped, due.next_ms) == (skipped, base + after_s * 1000)


@pytest.mark.parametrize(
    ("cron", "tz", "field"),
    [("61 * * * *", "UTC", "cron"), ("* * *", "UTC", "cron"), ("* * * * * * *", "UTC", "cron"),
     ("* * * * *", "Nowhere/City", "timezone"), ("* * * * *", "../etc", "timezone")],
)  # fmt: skip
def test_what_cannot_fire_is_refused_naming_its_field(cron: str, tz: str, field: str) -> None:
    with pytest.raises(CronError) as exc:
        timing(cron, tz)
    assert exc.value.field == field
