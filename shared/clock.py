"""Wall-clock time in unix milliseconds, the unit every stored timestamp uses."""

from __future__ import annotations

import time

__all__ = ["now_ms"]


def now_ms() -> int:
    return int(time.time() * 1000)
