"""The arq worker: a Worker that claims, starts and finishes its jobs itself,
over every partition's queue, and survives Redis outages and failovers.

arq facts designed around (0.28): a SIGKILLed job is retried only after its in-progress key
expires (job timeout + 10 s); a job timeout is a terminal failure; a connection error in the poll
loop ends ``Worker.main``. So the job timeout is set beyond any run's duration, crash recovery is
ours (lease + reconciler + a new job id per dispatch), and the poll loop is wrapped.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

from arq.connections import ArqRedis
from arq.utils import timestamp_ms
from arq.worker import Worker
from redis.exceptions import RedisError

from shared.dispatch import RUN_FUNCTION
from shared.keys import Partition
from shared.partitions import Partitions
from shared.scripts import Scripts
from worker.process import failpoints
from worker.process.agent_job import JOB_TIMEOUT_S, run_agent
from worker.process.claims import FIRST_STEP_TURNS, START_CHUNK, claim_size
from worker.process.finisher import JobEnding, JobFinisher
from worker.process.wake import IDLE_POLLS, Wake
from worker.process.woken_claims import WokenClaims

__all__ = ["JOB_TIMEOUT_S", "START_CHUNK", "ResilientWorker", "claim_size", "run_agent"]

log = logging.getLogger("agentmill.worker")


class ResilientWorker(WokenClaims, Worker):
    """arq's Worker whose poll loop outlives a Redis restart, which claims jobs in batches and which
    starts and finishes the jobs it claimed itself.

    arq claims each job with its own WATCH/MULTI transaction, one job after another, which caps
    how fast a worker fills up (about 700 jobs/s on two cores). ``start_jobs_on`` here claims every
    due job it has room for in one script with the same rule (the job is due and its in-progress
    key is free), and takes each claimed run under the worker's lease in the same call
    (``acquire_run``), so a worker that dies after its claim leaves the run to the reconciler one
    lease later. A claim without a lease id (the run taken later, by acquire.lua) moves the run's
    reconciler check to one lease from now instead.

    A claim takes ``claim_size`` jobs: a deep queue fills an idle worker in a few claims, and other
    workers polling meanwhile still find the other half. A claim that came back full is followed by
    the next one at once, sent before its jobs start (``_start_claims``).

    arq's ``run_job`` then reads the job and bumps its retry counter in one transaction and
    ``finish_job`` clears its keys in another: two round trips and much Python per job. A job id
    here already names its run and dispatch (``keys.job_id``; a dispatch is never re-run under the
    same id, since a claimed job leaves the queue), so ``_run_claimed`` starts the run from the id
    alone and the jobs ending in one loop turn are finished together (``JobFinisher``), with arq's
    keys and result record. A job whose key Redis lost still runs: its run hash decides.
    """

    parts: Partitions[Any]  # the partitions whose queues this worker serves, on arq's clients
    scripts: Scripts  # the process's (WorkerProcess sets them)
    claim_batch: int = 64
    workers: int = 2  # live workers (itself included) at the last beat: 2 until one says otherwise
    claim_check_ms: int = 30_000  # the lease: a claimed run not acquired by then is re-dispatched
    max_running: int = 0  # per tenant and partition (0: none); over-cap jobs are held back
    running_caps: str = ""  # {tenant: maxRunning} JSON of tenants with their own quota
    finisher: JobFinisher | None = None
    wake: Wake | None = None  # waits for a wake signal when a poll claimed nothing (main)

    async def _due_jobs(self, full: bool) -> list[tuple[Partition, int, bool]]:
        """Every partition's count of due jobs (none counted when the worker is ``full``: the claim
        script picks them itself, in queue order, priority first: shared/lua/prelude.lua
        queue_score), and whether a scheduled job is due there (the claim moves it to the queue): one
        pipelined round trip per node. A partition's scheduled jobs are looked at when the earliest
        one seen is due, and once a second besides (a run scheduled sooner meanwhile is seen within a
        second of its runAt at worst)."""
        now = timestamp_ms()
        look = {
            p.index for p in self.parts.parts
            if now >= self._next_due.get(p.index, 0) or now >= self._looked_at.get(p.index, 0) + 1000
            or p.index in self._woken
        }  # fmt: skip
        if not full:  # a full worker claims there first once it has room
            self._woken.clear()

        def read(part: Partition) -> Callable[[Any], None]:
            def op(pipe: Any) -> None:
                if not full:
                    pipe.zcount(part.queue, "-inf", now)
                if part.index in look:
                    pipe.zrange(part.scheduled, 0, 0, withscores=True)

            return op

        # A node without a master for now (a failover under way) must not hold up the others'.
        replies = await self.parts.pipelined(
            [(p, read(p)) for p in self.parts.parts], deadline_s=self.poll_delay_s * 4, skip_failed=True
        )
        out: list[tuple[Partition, int, bool]] = []
        for p, r in zip(self.parts.parts, replies, strict=True):
            if not r:
                continue
            n = 0 if full else int(r[0])
            due = False
            if p.index in look:
                first = r[-1]
                self._looked_at[p.index] = now
                self._next_due[p.index] = first[0][1] if first else float("inf")
                due = self._next_due[p.index] <= now
            if n or due:
                out.append((p, n, due))
        return out

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # per partition: the earliest scheduled job's runAt seen, and when it was looked at (ms)
        self._next_due: dict[int, float] = {}
        self._looked_at: dict[int, float] = {}
        self._woken: set[int] = set()  # partitions whose wake signal ended the last wait
        self._claimed = 0  # jobs the last poll claimed
        self._left = 0  # due jobs the last poll saw and did not claim (other workers', or too many)
        self._idle_rides = 0  # waits in a row whose riding claims took nothing (claims.IDLE_RIDES)
        # The worker's RedisWatch.in_outage: True when a failed poll belongs to a Redis outage,
        # logged once there (shared/outage_log.py); it then goes to the debug log, not a warning each
        self.in_outage: Callable[[BaseException], bool] = lambda exc: False

    async def _poll_iteration(self) -> None:
        """arq's poll over every partition's queue: claim what is due, then arq's health record."""
        self._claimed, seen = 0, 0
        try:
            rode, seen = await self._start_rides()  # the claims that rode behind the last waits
            if self.allow_pick_jobs and self._woken and self._free_slots() > 0:
                woken, self._woken = self._woken, set()
                seen += await self._claim_woken(woken)
            elif self.allow_pick_jobs and not self._polled_by_rides(rode):
                due = await self._due_jobs(self._free_slots() <= 0)
                seen += sum(n for _, n, _ in due)
                # Partitions in turn from a rotating start, so none is always served last.
                if due:
                    k = self._poll_turn % len(due)
                    self._poll_turn += 1
                    for part, n, scheduled in due[k:] + due[:k]:
                        await self.start_jobs_on(part, n, scheduled)
                if seen > self._claimed:  # what it left there the next poll claims without a count first
                    self._woken |= {p.index for p, n, _ in due if n}
            self._left = max(0, seen - self._claimed)
            self._idle_rides = 0 if self._claimed else self._idle_rides + bool(rode)
            await self.heart_beat()
        except (RedisError, OSError) as exc:
            level = logging.DEBUG if self.in_outage(exc) else logging.WARNING
            log.log(level, "redis unavailable in the poll loop (%s: %s); retrying", type(exc).__name__, exc)
            if not self.parts.single:
                with contextlib.suppress(Exception):
                    await self.parts.topology.refresh()
            await asyncio.sleep(0.5)

    _poll_turn = 0

    async def record_health(self) -> None:
        """arq's health record, through the client of partition 0's master *now*: arq writes it with
        ``self.pool``, the client that master had at start-up, which after a failover is a replica
        answering MOVED on every poll. ``Partitions.call`` follows the failover (and ``close`` then
        deletes the record on the same node)."""
        last = self._last_health_check
        if time.time() - last < self.health_check_interval:
            return

        async def record(client: ArqRedis) -> None:
            self._pool = client
            self._last_health_check = last  # a retry after a MOVED writes it again
            await Worker.record_health(self)

        await self.parts.call(self.parts.parts[0], record)

    async def main(self) -> None:
        """arq's loop, with ``_poll_iteration`` over the partitions; a burst worker stops when every
        partition's queue is empty and its jobs are done.

        A full worker polls again as soon as one of its jobs ends (at most every tenth of the poll
        delay) instead of at the next tick: the slot goes to the first job in the queue's order
        then, so a high-priority run waits for a free slot, not for a slot and a poll delay.

        A worker whose poll left no due job behind (it claimed all it saw, or saw none) waits for a
        wake signal (worker/process/wake.py) for IDLE_POLLS poll intervals, or until the earliest scheduled
        job it knows of. Its claim rides behind the wait (worker/process/woken_claims.py): Redis runs
        it as the signal comes, and the wait's reply brings what it took (a claim that could not
        ride, ``_claim_woken``, is the first call after the signal, no count before it): a new job
        starts within the signal's delivery, not a poll delay. A worker with
        free slots that saw more due jobs than it claimed (a deep queue, shared with other workers
        by ``claim_size``) polls again a tenth of the poll delay after its last poll began, with no
        wait call in between."""
        self.ctx["redis"] = self.pool
        self._freed = asyncio.Event()
        loop = asyncio.get_running_loop()
        while True:
            before = loop.time()
            self._full = False
            await self._poll_iteration()
            if self.burst:
                depth = sum(n for (n,) in await self.parts.each(lambda pipe, p: pipe.zcard(p.queue)))
                if depth == 0 and self.job_counter == 0:
                    await asyncio.gather(*self.tasks.values())
                    return
            self._full = self.job_counter >= self.max_jobs
            self._freed.clear()
            wait = max(0.0, self.poll_delay_s - (loop.time() - before))
            if self._full:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._freed.wait(), wait)
                wait = max(0.0, self.poll_delay_s / 10 - (loop.time() - before))
            elif self._left and self.allow_pick_jobs:
                wait = max(0.0, self.poll_delay_s / 10 - (loop.time() - before))
            elif self.wake is not None and self.allow_pick_jobs and not self.burst:
                for _ in range(FIRST_STEP_TURNS if self._claimed else 0):
                    await asyncio.sleep(0)  # the runs it just started go first (claims.py)
                idle = max(0.0, IDLE_POLLS * self.poll_delay_s - (loop.time() - before))
                until = min(idle, self._until_scheduled())
                self._woken = await self.wake.wait(until, call=not self._left)
                continue
            await asyncio.sleep(wait)

    _freed: asyncio.Event | None = None  # set when a job of a full worker ends
    _full = False

    def _until_scheduled(self) -> float:
        """Seconds until the earliest scheduled job seen on any partition is due (inf: none)."""
        first = min(self._next_due.values(), default=float("inf"))
        return max(0.0, (first - timestamp_ms()) / 1000)

    async def close(self) -> None:
        if self.wake is not None:
            await self.wake.aclose()
        await super().close()

    async def start_jobs_on(self, part: Partition, due: int, scheduled: bool = False) -> None:
        """Claim what ``claim_size`` allows of the ``due`` jobs seen on the partition (the script
        picks them, in queue order); ``scheduled``: a scheduled job is due on the partition, so the
        claim script runs even for a full worker (it moves the job to the queue, where it waits with
        its priority and its runAt as its place, and shows as queued)."""
        free = claim_size(self._free_slots(), due, self.claim_batch, self.workers)
        if free <= 0 and not scheduled:
            return
        free = self._room(free)
        reply, lease_id = await self._claim(part, free)
        await self._start_claims(part, reply, lease_id, free, due)

    async def _claim(self, part: Partition, free: int) -> tuple[list[Any], str]:
        """claim_jobs.lua's reply on ``part`` for up to ``free`` due jobs, and the runs' lease id."""
        k, a, lease_id = self._claim_call(part, free)
        claim = self.scripts.claim_jobs
        return await self.parts.call(part, lambda c: claim(keys=k, args=a, client=c)), lease_id

    async def _start_claims(
        self, part: Partition, reply: list[Any], lease_id: str, asked: int, due: int
    ) -> tuple[int, bool]:
        """Start the jobs of a claim's ``reply`` (of ``asked``; ``due``: as the poll counted, 0: not
        counted). While claims come back full, more are due and there is room, the next claim goes
        out before this one's jobs start: Redis runs it (256 jobs: 12-23 ms) while the worker starts
        them. Returns the jobs started and whether the last claim was full (more may be due)."""
        started = 0
        while True:
            n = len(reply) // 3
            full, more = asked > 0 and n >= asked, max(0, due - n)
            free = self._room(claim_size(self._free_slots() - n, more, self.claim_batch, self.workers))
            go = full and (more or not due) and self.allow_pick_jobs and free > 0
            ahead = asyncio.ensure_future(self._claim(part, free)) if go else None
            try:
                started += await self._start_claimed(part, reply, lease_id)
            except BaseException:
                if ahead is not None:
                    ahead.cancel()
                raise
            if ahead is None:
                return started, full
            (reply, lease_id), asked, due = await ahead, free, more

    async def _start_claimed(self, part: Partition, reply: list[Any], lease_id: str) -> int:
        """A task for each job the claim's ``reply`` names (id, queue score, what acquire_run
        answered for ``lease_id``): how many."""
        if self.finisher is None:
            self.finisher = JobFinisher(self.parts, int(self.keep_result_s * 1000))
        if reply and failpoints.once("claim_reply_lost"):
            return 0
        self._claimed += len(reply) // 3
        for i in range(0, len(reply), 3):
            job_id = reply[i].decode() if isinstance(reply[i], bytes) else str(reply[i])
            score = int(float(reply[i + 1]))
            await self.sem.acquire()
            self.job_counter += 1
            acquired = (lease_id, reply[i + 2]) if reply[i + 2] else None  # the run, taken by the claim
            task = self.loop.create_task(self._run_claimed(part, job_id, score, acquired), name=job_id)
            task.add_done_callback(self._job_done)
            self.tasks[job_id] = task
            if (i // 3 + 1) % START_CHUNK == 0:
                await asyncio.sleep(0)  # these take their first steps before the next ones start
        return len(reply) // 3

    def _job_done(self, task: asyncio.Task[None]) -> None:
        """Free the slot and forget the task (arq's poll would walk every task to find the done);
        a full worker's poll loop wakes (``main``)."""
        self._release_sem_dec_counter_on_complete()
        if self._full and self._freed is not None:
            self._freed.set()
        job_id = task.get_name()
        if self.tasks.get(job_id) is task:
            del self.tasks[job_id]

    async def _run_claimed(
        self, part: Partition, job_id: str, score: int, acquired: tuple[str, list[Any]] | None
    ) -> None:
        """arq's ``run_job`` for a job this worker claimed (and whose run the claim ``acquired``),
        without its two transactions."""
        assert self.finisher is not None
        _, run_id, gen = self.parts.layout.of_job(job_id)
        function = self.functions[RUN_FUNCTION]
        ctx = {
            **self.ctx,
            "job_id": job_id,
            "job_try": 1,
            "score": score,
            "partition": part,
            "acquired": acquired,
        }
        ending = ctx["job_end"] = JobEnding(job_id, (run_id, gen), score, self.queue_name, self.job_serializer,
                                            int(self.keep_result_s * 1000))  # fmt: skip
        result: Any = None
        finished, success = True, False
        try:
            result = await function.coroutine(ctx, run_id, gen)
            success = True
            self.jobs_complete += 1
        except asyncio.CancelledError:
            finished = False  # shutdown: the job stays for the reconciler, as arq leaves it (and,
            # as arq does, the task then ends normally: Worker.close gathers the tasks)
            self.jobs_retried += 1
        except Exception as exc:
            log.exception("job %s failed", job_id)
            result = exc
            self.jobs_failed += 1
        if finished and ending.finished(success, result):
            return  # its run's ending commit finished it
        # a deleted run's job: no record
        record = ending.record(success, result) if finished and result != "deleted" else None
        # Shutdown: arq's close cancels its job tasks, then gathers them without return_exceptions.
        # A cancel that lands here, while the finish runs on shielded, ends the task normally as one
        # landing in the job does; raised, it failed the worker's close (seen once in a full suite).
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.shield(self.finisher.finish(job_id, finished, record))
