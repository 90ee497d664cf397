"""A worker with nothing to claim waits for a wake signal instead of sleeping until its next poll.

Every script that makes a job due (a submission, a resume after client tools, an approval or a
child, a redispatch, a held job let go, a scheduled job moved to the queue) or schedules one pushes
a signal on its partition's wake list (``keys.Partition.wake``, prelude.lua ``wake``) in the same
call. ``Wake.wait`` blocks on every partition's list (BLPOP, one call a partition, each on a
connection of its own while it blocks) until a signal comes or the time given passes; one signal
wakes one worker, so one worker claims a new job while the others keep waiting.

A BLPOP still blocked when its worker stops waiting (a signal on another partition, the time up)
stays in flight: the next wait takes it over, so a signal it pops meanwhile is not lost, and no
wait cancels a call (which would cost its connection). The caller polls after every wait, woken or
not: that poll finds what a lost signal would have started. An idle worker waits ``IDLE_POLLS``
poll intervals between its polls: with the wait call beside each poll, it issues fewer Redis
commands a second than polling every interval did, and a lost signal costs at most that long.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from shared.keys import Partition
from shared.partitions import Partitions
from worker.process import failpoints

__all__ = ["IDLE_POLLS", "Wake"]

log = logging.getLogger("agentmill.worker")

MIN_WAIT_S = 0.002  # shorter waits are not worth a call (and BLPOP's timeout 0 would block forever)
IDLE_POLLS = 2  # an idle worker polls every second poll interval (a lost signal's longest wait)


class Wake:
    def __init__(self, parts: Partitions[Any]) -> None:
        self.parts = parts
        self._calls: dict[int, asyncio.Task[bool]] = {}  # partition index -> its BLPOP in flight
        self.signals = 0  # signals taken (tests, the bench)

    async def wait(self, timeout_s: float, *, call: bool = True) -> set[int]:
        """Until a wake signal comes on some partition or ``timeout_s`` has passed: the indexes of
        the partitions that signalled (none when the time ran out). ``call=False``: no new BLPOP,
        only those still in flight (a worker that just claimed jobs: a signal one of them takes
        meanwhile is for it), then a sleep."""
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout_s
        while (left := end - loop.time()) >= MIN_WAIT_S:
            if call:
                for part in self.parts.parts:
                    if part.index not in self._calls:
                        self._calls[part.index] = asyncio.create_task(self._pop(part, left))
            if not self._calls:
                await asyncio.sleep(left)
                break
            await asyncio.wait(self._calls.values(), timeout=left, return_when=asyncio.FIRST_COMPLETED)
            woken = {i for i, t in list(self._calls.items()) if t.done() and self._calls.pop(i).result()}
            if woken:
                self.signals += len(woken)
                return woken
        return set()

    async def _pop(self, part: Partition, timeout_s: float) -> bool:
        """One BLPOP on the partition's wake list: whether it took a signal. A failed call (Redis
        down, a failover) waits out its time, so a wait never spins."""
        try:
            got = await self.parts.call(
                part, lambda c: c.blpop([part.wake], timeout=round(timeout_s, 3)), deadline_s=timeout_s
            )
        except Exception as exc:  # RedisError, OSError (TimeoutError among them)
            log.debug("wake wait on %r failed (%s: %s)", part, type(exc).__name__, exc)
            await asyncio.sleep(timeout_s)
            return False
        return got is not None and not failpoints.on("drop_wake_signal")

    async def aclose(self) -> None:
        """Cancel the calls in flight (their connections are closed) and wait for them."""
        calls = list(self._calls.values())
        self._calls.clear()
        for t in calls:
            t.cancel()
        with contextlib.suppress(Exception):
            await asyncio.gather(*calls, return_exceptions=True)
