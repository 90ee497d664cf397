"""Wall-clock time in unix milliseconds, the unit every stored timestamp uses, and UTC days (the
unit of tenants' budgets and usage reports)."""

from __future__ import annotations

import time

__all__ = ["DAY_MS", "ms_to_next_utc_day", "now_ms", "utc_day"]

DAY_MS = 86_400_000


def now_ms() -> int:
    return int(time.time() * 1000)


def utc_day(ms: int) -> str:
    """The UTC day of a time (unix ms), YYYY-MM-DD."""
    return time.strftime("%Y-%m-%d", time.gmtime(ms // 1000))


def ms_to_next_utc_day(ms: int) -> int:
    """Milliseconds from ``ms`` to the next UTC midnight (never 0)."""
    return DAY_MS - ms % DAY_MS
