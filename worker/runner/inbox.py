"""A run's inbox: what its effects and the worker tell its loop, read by that loop alone.

asyncio.Queue does more than this needs (maxsize, task_done/join, any number of getters and
putters) and costs a deque for each and an Event to build, once per run. Here: one deque and, while
the loop waits, one future. It is unbounded as the Queue was: what it holds is bounded by the
run's own effects (a model call, a round's tool calls, their timers) and the worker's few signals.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Generic, TypeVar

__all__ = ["Inbox"]

T = TypeVar("T")


class Inbox(Generic[T]):
    __slots__ = ("_items", "_waiter")

    def __init__(self) -> None:
        self._items: deque[T] = deque()
        self._waiter: asyncio.Future[bool] | None = None  # True: put; False: timed out

    def __len__(self) -> int:
        return len(self._items)

    def put_nowait(self, item: T) -> None:
        self._items.append(item)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(True)

    async def get(self) -> T:
        """The oldest item, once there is one (one reader: the run's loop)."""
        while not self._items:
            await self._wait(None)
        return self._items.popleft()

    async def get_within(self, within_s: float) -> T | None:
        """The oldest item, or None when ``within_s`` passes with nothing put."""
        while not self._items:
            if not await self._wait(within_s):
                return None
        return self._items.popleft()

    async def _wait(self, within_s: float | None) -> bool:
        """Until a put (True), or ``within_s`` passes first (False)."""
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[bool] = loop.create_future()
        self._waiter = waiter
        timer = None if within_s is None else loop.call_later(within_s, _time_out, waiter)
        try:
            return await waiter
        finally:
            self._waiter = None
            if timer is not None:
                timer.cancel()


def _time_out(waiter: asyncio.Future[bool]) -> None:
    if not waiter.done():
        waiter.set_result(False)
