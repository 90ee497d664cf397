"""The claims that ride behind a worker's waits (worker/process/woken_claims.py): together they never
ask for more jobs than the worker has room for, and the room they hold is free again once their
replies are taken."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from types import SimpleNamespace
from typing import Any, cast

from shared.keys import Layout, Partition
from worker.process.claims import IDLE_RIDES, RIDE_JOBS
from worker.process.wake import Wake
from worker.process.woken_claims import WokenClaims


class _Parts:
    """Partitions whose every call is a wait that times out (no signal comes)."""

    def __init__(self, n: int) -> None:
        self.parts = Layout(n).parts

    async def call(self, part: Partition, fn: Callable[[Any], Awaitable[Any]], *, deadline_s: float) -> Any:
        await asyncio.sleep(deadline_s)
        return None


class _Worker(WokenClaims):
    def __init__(self, max_jobs: int, running: int) -> None:
        self.max_jobs, self.job_counter = max_jobs, running
        self.claim_batch, self.workers = 64, 1
        self.allow_pick_jobs = True
        self._idle_rides = 0
        self.ctx = {}
        self.scripts = cast(
            Any, SimpleNamespace(claim_jobs=SimpleNamespace(command=lambda k, a: ("FCALL", "c", 0)))
        )

    def _claim_call(
        self, part: Partition, free: int, *, ahead: bool = False
    ) -> tuple[list[Any], list[Any], str]:
        assert ahead  # a claim riding behind a wait: on the server's clock when it runs
        return [], [], "lease"


async def test_the_rides_of_three_partitions_share_the_room_and_free_it_when_taken() -> None:
    w = _Worker(max_jobs=20, running=10)
    w.wake = wake = Wake(_Parts(3), ride=w._ride)  # type: ignore[arg-type]
    waiting = asyncio.create_task(wake.wait(0.05))
    await asyncio.sleep(0.01)
    # RIDE_JOBS at most a ride, then what room is left; the third waits with no claim behind it
    assert sorted(r.asked for r in wake._riding.values()) == [2, RIDE_JOBS]
    assert wake.reserved == 10 and w._free_slots() == 0
    assert await waiting == set()  # the time ran out: no signal
    rides = wake.take()
    assert sorted(r.asked for r in rides) == [2, RIDE_JOBS] and wake.reserved == 0
    assert w._free_slots() == 10


async def test_a_worker_that_stops_taking_jobs_or_has_been_idle_a_while_sends_no_claim_behind_its_wait() -> (
    None
):
    w = _Worker(max_jobs=10, running=0)
    w.wake = Wake(_Parts(1), ride=w._ride)  # type: ignore[arg-type]
    assert w._ride(Layout(1).parts[0]) is not None
    w.allow_pick_jobs = False  # draining
    assert w._ride(Layout(1).parts[0]) is None
    w.allow_pick_jobs, w.job_counter = True, 10  # full
    assert w._ride(Layout(1).parts[0]) is None
    w.job_counter, w._idle_rides = 0, IDLE_RIDES  # idle: that many waits in a row took nothing
    assert w._ride(Layout(1).parts[0]) is None
    w._idle_rides = IDLE_RIDES - 1
    assert w._ride(Layout(1).parts[0]) is not None


async def test_a_landed_rides_look_at_the_scheduled_jobs_sets_when_the_next_one_is_due() -> None:
    """The ride's replies are raw: its ZRANGE WITHSCORES a flat [member, score]."""
    w = _Worker(max_jobs=10, running=0)
    w._next_due, w._looked_at, w._woken = {}, {}, set()
    started: list[Any] = []

    async def start_claims(part: Partition, reply: list[Any], lease_id: str, asked: int, due: int) -> Any:
        started.append(reply)
        return 0, False

    w._start_claims = start_claims  # type: ignore[method-assign]
    w.wake = wake = Wake(_Parts(2), ride=w._ride)  # type: ignore[arg-type]
    due, nothing = (w._ride(p) for p in Layout(2).parts)
    assert due is not None and nothing is not None
    assert due.commands[-1] == ("ZRANGE", due.part.scheduled, 0, 0, "WITHSCORES")
    due.replies, nothing.replies = [[], [b"job-1", b"1234567"]], [[], []]
    wake.landed += [due, nothing]
    covered, seen = await w._start_rides()
    assert covered == {0, 1} and seen == 0 and started == [[], []]
    assert w._next_due == {0: 1234567.0, 1: float("inf")}
