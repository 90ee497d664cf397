"""Bounded waiting for the async tests: poll a condition, fail naming what was awaited."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

__all__ = ["until"]


async def until(what: str, check: Callable[[], Awaitable[Any]], within: float, every: float = 0.1) -> Any:
    """Poll ``check`` until it returns something truthy; fail naming ``what`` and the last value."""
    deadline = time.monotonic() + within
    last: Any = None
    while True:
        last = await check()
        if last:
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {within:.0f} s waiting for {what}; last seen: {last!r}")
        await asyncio.sleep(every)
