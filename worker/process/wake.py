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

A wait can carry a call behind it (``Ride``: the worker's claim, worker/process/woken_claims.py): sent on
the BLPOP's connection in the same write, Redis runs it the moment the BLPOP ends (a signal, or the
time up), so a woken worker's claim costs no round trip of its own. Its reply lands with the wait's
(``Wake.landed``), whether a signal ended it or not: a claim riding behind a wait that timed out
is the idle worker's poll, so a lost signal costs a wait's time (a BLPOP's time runs out on the
server's clock tick: up to 100 ms late).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from shared.keys import Partition
from shared.partitions import Partitions
from shared.route import Command, pipelined
from worker.process import failpoints

__all__ = ["IDLE_POLLS", "Ride", "Wake"]

log = logging.getLogger("agentmill.worker")

MIN_WAIT_S = 0.002  # shorter waits are not worth a call (and BLPOP's timeout 0 would block forever)
IDLE_POLLS = 2  # an idle worker polls every second poll interval (a lost signal's longest wait)


@dataclass(eq=False)
class Ride:
    """A call sent behind a partition's wait (``commands``, written after the wait's BLPOP), and
    their raw replies once the wait has ended (``replies``: an error reply is that command's; an
    exception: the call failed, not run)."""

    part: Partition
    commands: list[Command]
    asked: int = 0  # the jobs its claim may take (the worker keeps room for them while it rides)
    lease_id: str = ""
    replies: list[Any] | BaseException = field(default_factory=list)


class Wake:
    def __init__(
        self, parts: Partitions[Any], ride: Callable[[Partition], Ride | None] | None = None
    ) -> None:
        self.parts = parts
        self.ride = ride  # the call each new wait carries on its partition (None: none)
        self._calls: dict[int, asyncio.Task[bool]] = {}  # partition index -> its BLPOP in flight
        self._riding: dict[int, Ride] = {}  # partition index -> the ride of its BLPOP in flight
        self.landed: list[Ride] = []  # rides whose wait has ended, their replies in: the worker's to take
        self.signals = 0  # signals taken (tests, the bench)

    @property
    def reserved(self) -> int:
        """The jobs the claims riding behind the waits in flight, and those landed, may have taken."""
        return sum(r.asked for r in self._riding.values()) + sum(r.asked for r in self.landed)

    @property
    def riding(self) -> set[int]:
        """The partitions whose wait in flight carries a ride."""
        return set(self._riding)

    def take(self) -> list[Ride]:
        """The rides landed so far, the waits ended since the last ``wait`` among them; the worker
        starts what their claims took."""
        self._collect()
        out, self.landed = self.landed, []
        return out

    def _collect(self) -> set[int]:
        """Forget the waits that have ended (their rides to ``landed``): the partitions signalled."""
        woken = set()
        for i, t in list(self._calls.items()):
            if t.done():
                del self._calls[i]
                if (ride := self._riding.pop(i, None)) is not None:
                    self.landed.append(ride)
                if t.result():
                    woken.add(i)
        return woken

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
                        ride = self.ride(part) if self.ride is not None else None
                        if ride is not None:
                            self._riding[part.index] = ride
                        self._calls[part.index] = asyncio.create_task(self._pop(part, left, ride))
            if not self._calls:
                await asyncio.sleep(left)
                break
            await asyncio.wait(self._calls.values(), timeout=left, return_when=asyncio.FIRST_COMPLETED)
            woken = self._collect()
            if woken:
                self.signals += len(woken)
                return woken
            if self.landed:  # a ride's claim may have taken jobs: the worker starts them now
                break
        return set()

    async def _pop(self, part: Partition, timeout_s: float, ride: Ride | None = None) -> bool:
        """One BLPOP on the partition's wake list (and the ``ride`` behind it): whether it took a
        signal. A failed call (Redis down, a failover) waits out its time, so a wait never spins."""
        timeout = round(timeout_s, 3)

        async def pop(c: Any) -> Any:
            if ride is None:
                return await c.blpop([part.wake], timeout=timeout)
            # Raw replies, in one write and one read (shared.route.pipelined): the wait's reply is
            # on a woken claim's path, and redis-py's pipeline costs more than the claim's parse.
            got = await pipelined(c, [("BLPOP", part.wake, timeout), *ride.commands])
            if isinstance(got[0], Exception):  # the wait itself failed (a failover): the call follows it
                raise got[0]
            ride.replies = got[1:]
            return got[0]

        try:
            got = await self.parts.call(part, pop, deadline_s=timeout_s)
        except Exception as exc:  # RedisError, OSError (TimeoutError among them)
            log.debug("wake wait on %r failed (%s: %s)", part, type(exc).__name__, exc)
            if ride is not None:
                ride.replies = exc
            await asyncio.sleep(timeout_s)
            return False
        return got is not None and not isinstance(got, Exception) and not failpoints.on("drop_wake_signal")

    async def aclose(self) -> None:
        """Cancel the calls in flight (their connections are closed) and wait for them."""
        calls = list(self._calls.values())
        self._calls.clear()
        self._riding.clear()
        for t in calls:
            t.cancel()
        with contextlib.suppress(Exception):
            await asyncio.gather(*calls, return_exceptions=True)
