"""Event-loop helpers: run a coroutine on uvloop when it is installed (it is a dependency on
Linux/macOS, else asyncio), and race an awaitable against a stop event (``unless_closing``: the
API's streams at shutdown, the worker's start-up at SIGTERM)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Coroutine
from typing import Any, TypeVar

__all__ = ["run", "unless_closing"]

T = TypeVar("T")


def run(main: Coroutine[Any, Any, T]) -> T:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - Windows
        return asyncio.run(main)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main)


async def unless_closing(closing: asyncio.Event, aw: Awaitable[T]) -> tuple[bool, T | None]:
    """``(True, aw's result)``, or ``(False, None)`` with ``aw`` cancelled once ``closing`` is set."""
    if closing.is_set():
        if asyncio.iscoroutine(aw):
            aw.close()
        return False, None
    task = asyncio.ensure_future(aw)
    stop = asyncio.ensure_future(closing.wait())
    try:
        await asyncio.wait({task, stop}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stop.cancel()
        if not task.done():
            task.cancel()
        await asyncio.gather(stop, task, return_exceptions=True)
    if task.cancelled():
        return False, None
    return True, task.result()
