"""The claims of a worker woken by a signal (worker/process/wake.py), a part of the arq worker
(worker/process/arq_worker.py ResilientWorker).

An idle worker's wait carries its claim behind it (``_ride``): the claim is sent with the BLPOP, in
one write on the wait's connection, and Redis runs it the moment the wait ends, its time taken then
(claim_jobs.lua with no time given). A submission's signal is thus answered by the claim of the
worker it woke with no round trip in between: the wait's reply brings the claim's. A claim that
rode behind a wait that timed out is the idle worker's poll (nothing left behind: no count follows).
An idle worker's own poll is left to the claims riding (``_polled_by_rides``), until IDLE_RIDES
waits in a row took nothing: its waits then carry none and it counts the queue, until a claim takes
a job again. Every guarantee of a claim sent on its own holds: the claim script's rule and its
check of the worker's lease, the run's reconciler check a lease from now (a worker that dies before it reads
the reply, or whose reply is lost, leaves its runs to the reconciler), one signal waking one
worker. While claims ride, the worker keeps room for what they may take (``Wake.reserved``).
What differs: a worker paused (or cut off) just after it sent a wait holds what its ride claims when
that wait ends (one claim of at most RIDE_JOBS, within the wait's time: up to IDLE_POLLS poll
intervals and a server tick) until it resumes, or until its lease runs out and the reconciler
re-dispatches them, where a wait alone would take only a signal and leave the job to the others'
polls.
"""

from __future__ import annotations

import time
from typing import Any

from arq.constants import in_progress_key_prefix
from arq.utils import timestamp_ms

from shared.calls.dispatch import ClaimJobs
from shared.keys import Partition
from shared.partitions import Partitions
from shared.scripts import Scripts
from worker.process import failpoints
from worker.process.claims import IDLE_RIDES, RIDE_JOBS, claim_size
from worker.process.deps import WorkerDeps
from worker.process.wake import Ride, Wake

__all__ = ["WokenClaims"]


class WokenClaims:
    """The woken worker's claims, for ResilientWorker (which has arq's Worker's attributes)."""

    parts: Partitions[Any]
    scripts: Scripts
    wake: Wake | None
    ctx: dict[str, Any]
    max_jobs: int
    job_counter: int
    claim_batch: int
    workers: int
    claim_check_ms: int
    max_running: int
    running_caps: str
    allow_pick_jobs: bool
    in_progress_timeout_s: float
    poll_delay_s: float
    _next_due: dict[int, float]
    _looked_at: dict[int, float]
    _woken: set[int]
    _left: int
    _idle_rides: int  # waits in a row whose claims took nothing (the worker's poll iteration keeps it)

    async def _start_claims(
        self, part: Partition, reply: list[Any], lease_id: str, asked: int, due: int
    ) -> tuple[int, bool]:
        raise NotImplementedError  # ResilientWorker's

    def _free_slots(self) -> int:
        """The slots no job holds, less those the claims riding behind waits may fill."""
        return self.max_jobs - self.job_counter - (self.wake.reserved if self.wake is not None else 0)

    def _room(self, free: int) -> int:
        """``free``, or none past the worker's lease (a claim then only moves due scheduled jobs)."""
        deps: WorkerDeps | None = self.ctx.get("deps")
        if deps is not None and deps.lease is not None and deps.lease.expired():
            return 0
        return max(0, free)

    def _claim_call(
        self, part: Partition, free: int, *, ahead: bool = False
    ) -> tuple[list[Any], list[Any], str]:
        """claim_jobs.lua's keys and arguments on ``part`` for up to ``free`` due jobs (the script
        picks them), framed, and the lease id the runs are taken under. ``ahead``: a claim riding
        behind a wait, run later: on the server's clock then."""
        deps: WorkerDeps | None = self.ctx.get("deps")
        lease_id = deps.lease_id if deps is not None else ""
        now = 0 if ahead else int(time.time() * 1000)
        call = ClaimJobs(now, int(self.in_progress_timeout_s * 1000), free, in_progress_key_prefix,
                         self.claim_check_ms, self.max_running, self.running_caps, lease_id, ())  # fmt: skip
        k, a = self.scripts.frame(part, call.keys(part), call.argv())
        return k, a, lease_id

    def _ride(self, part: Partition) -> Ride | None:
        """The claim a new wait on ``part`` carries (and a look at its earliest scheduled job), or
        none: no room, no jobs to take, an idle worker (IDLE_RIDES waits in a row took nothing), or
        signals dropped (failpoint drop_wake_signal: a lost signal, whose job only a poll finds)."""
        if not self.allow_pick_jobs or self._idle_rides >= IDLE_RIDES or failpoints.on("drop_wake_signal"):
            return None
        free = self._room(min(RIDE_JOBS, claim_size(self._free_slots(), 0, self.claim_batch, self.workers)))
        if free <= 0:
            return None
        k, a, lease_id = self._claim_call(part, free, ahead=True)
        claim = self.scripts.claim_jobs.command(k, a)  # (a script missing there: that reply's error)
        return Ride(part, [claim, ("ZRANGE", part.scheduled, 0, 0, "WITHSCORES")], free, lease_id)

    async def _start_rides(self) -> tuple[set[int], int]:
        """Start the jobs the claims landed with their waits took: the partitions they claimed on
        (a failed one, e.g. the library missing on a new master, is left to a claim of its own) and
        the due jobs seen (at least one more where a claim came back full: the next poll claims
        there first, as it does after a woken claim)."""
        covered: set[int] = set()
        seen = 0
        for ride in self.wake.take() if self.wake is not None else ():
            got, i = ride.replies, ride.part.index
            if isinstance(got, BaseException) or len(got) < 2 or isinstance(got[0], BaseException):
                continue
            reply, first = got[0], got[1]
            if not isinstance(first, BaseException):  # (a raw reply: [member, score])
                self._looked_at[i] = timestamp_ms()
                self._next_due[i] = float(first[1]) if first else float("inf")
            n, full = await self._start_claims(ride.part, reply, ride.lease_id, ride.asked, 0)
            covered.add(i)
            seen += n
            if full:
                seen += 1
                self._woken.add(i)
            else:  # the signal answered (a signal that found nothing due: its claim finds no more)
                self._woken.discard(i)
        return covered, seen

    def _polled_by_rides(self, rode: set[int]) -> bool:
        """Whether this poll is left to the rides: every partition's claim landed (``rode``) or is
        riding behind a wait in flight, which Redis runs when that wait ends (a BLPOP's time runs
        out within the server's clock tick, up to 100 ms late: that is when its claim polls), no
        due jobs were left behind and no scheduled job is due."""
        riding = self.wake.riding if self.wake is not None else set()
        return (
            not self._left
            and len(rode | riding) >= len(self.parts.parts)
            and min(self._next_due.values(), default=float("inf")) > timestamp_ms()
        )

    async def _claim_woken(self, woken: set[int]) -> int:
        """A woken worker's poll of the partitions that signalled: each one's claim (the script picks
        the due jobs) and a look at its earliest scheduled job, in one round trip per node, with no
        count first (so does the poll after one that left due jobs behind: ``_poll_iteration``).
        Returns the due jobs seen: those claimed, and when a claim was full (more may be due: the
        next poll comes without a wait, and claims there first) at least one more."""
        now = timestamp_ms()
        seen = 0
        for part in (p for p in self.parts.parts if p.index in woken):
            free = self._room(claim_size(self._free_slots(), self._left, self.claim_batch, self.workers))
            out = self.parts.sending(deadline_s=self.poll_delay_s * 4)
            k, a, lease_id = self._claim_call(part, free)
            out.add_script(part, self.scripts.claim_jobs, k, a)
            out.add(part, ("ZRANGE", part.scheduled, 0, 0, "WITHSCORES"))
            reply, first = await out.replies()
            if isinstance(reply, Exception):
                raise reply
            if not isinstance(first, Exception):
                self._looked_at[part.index] = now
                self._next_due[part.index] = float(first[1]) if first else float("inf")
            n, full = await self._start_claims(part, reply, lease_id, free, 0)
            if full:  # more may be due there: the next poll claims there first, uncounted
                seen += max(1, self._left - n)  # what the last count left, less these
                self._woken.add(part.index)
            seen += n
        return seen
