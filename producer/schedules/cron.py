"""A schedule's times, pure: its cron expression in its time zone (croniter), the firings due at a
moment under the catch-up rule, and the next firings to show.

Five fields (minute hour day-of-month month day-of-week) or six, the first then being seconds
(``*/10 * * * * *``: every ten seconds). Times are epoch milliseconds; a firing is a whole second.

The catch-up rule: a firer that claims a schedule at ``now`` makes the firings from the schedule's
next firing up to ``now``, the latest ``catchup`` of them at most (older ones are skipped and
counted, up to SKIPPED_COUNTED); the next firing after that is the first one after ``now``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterError, croniter

__all__ = ["CronError", "Due", "Timing", "timing"]

MAX_FIELDS_CHARS = 200
SKIPPED_COUNTED = 1000  # the skipped firings of one catch-up are counted up to this many


class CronError(ValueError):
    """A cron expression or time zone that cannot be used; ``field`` names which."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True, slots=True)
class Due:
    """What a firer does at a moment: make ``fire`` (oldest first), count ``skipped`` older
    firings, and leave ``next_ms`` as the schedule's next firing."""

    fire: list[int]
    skipped: int
    next_ms: int


class Timing:
    """One cron expression in one time zone."""

    def __init__(self, expr: str, tz: str) -> None:
        fields = expr.split()
        if len(expr) > MAX_FIELDS_CHARS or len(fields) not in (5, 6):
            raise CronError(
                "cron", "cron: five fields (minute hour day month weekday) or six (seconds first)"
            )
        try:
            self.zone = ZoneInfo(tz)
        except (ZoneInfoNotFoundError, ValueError):
            raise CronError(
                "timezone", f"timezone: no time zone {tz!r} (an IANA name, e.g. Europe/Paris)"
            ) from None
        self.expr = " ".join(fields)
        self.seconds = len(fields) == 6
        try:
            self._iter(0).get_next(float)
        except (CroniterError, ValueError, KeyError) as exc:
            raise CronError("cron", f"cron: {exc}") from None

    def _iter(self, at_ms: int) -> croniter:
        start = datetime.fromtimestamp(at_ms / 1000, UTC).astimezone(self.zone)
        return croniter(self.expr, start, second_at_beginning=self.seconds)

    def after(self, at_ms: int, n: int = 1) -> list[int]:
        """The ``n`` firings strictly after ``at_ms``."""
        it = self._iter(at_ms)
        return [_ms(it.get_next(float)) for _ in range(n)]

    def due(self, next_ms: int, now_ms: int, catchup: int) -> Due:
        """The firings from ``next_ms`` to ``now_ms`` (both included) under the catch-up rule."""
        if next_ms > now_ms:
            return Due([], 0, next_ms)
        latest: list[int] = []
        # The latest ones, found backwards from now: work bounded by catchup, not by the outage.
        it = self._iter(now_ms + 1000 - now_ms % 1000)  # a firing at now_ms itself counts
        while len(latest) < catchup:
            t = _ms(it.get_prev(float))  # strictly before the start: at most now_ms
            if t < next_ms:
                break
            latest.append(t)
        latest.reverse()
        skipped = 0
        if len(latest) == catchup and latest[0] > next_ms:
            skipped = self._count(next_ms, latest[0])
        return Due(latest, skipped, self.after(now_ms)[0])

    def _count(self, start_ms: int, end_ms: int, cap: int = SKIPPED_COUNTED) -> int:
        """The firings in [start_ms, end_ms), counted up to ``cap`` (the work stays bounded)."""
        n, it, t = 0, self._iter(start_ms - 1), start_ms
        while n < cap:
            t = _ms(it.get_next(float))
            if t >= end_ms:
                break
            n += 1
        return n


def _ms(seconds: float) -> int:
    return round(seconds * 1000)


def timing(expr: str, tz: str) -> Timing:
    """The Timing of ``expr`` in ``tz``; CronError when either cannot be used."""
    return Timing(expr, tz)
