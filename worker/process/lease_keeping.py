"""The worker's lease and sweeps, as the worker process keeps them (worker/process/jobs.py): the lease
taken, beaten on every partition and, when lost, given up without writing (its runs fenced and
handed back, a new lease id taken); the reconciler's sweep for other workers' lost runs."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections import Counter

from redis.exceptions import RedisError

from shared.calls.dispatch import RedispatchReason
from shared.redis_watch import RedisWatch
from shared.settings import Settings
from worker.adapters.lease import WorkerLease
from worker.adapters.worker_beat import beat
from worker.process import failpoints
from worker.process.arq_worker import ResilientWorker
from worker.process.deps import WorkerDeps
from worker.process.reconciler import hand_back_unheld, reconcile_once, reconcile_worker, runs_of
from worker.telemetry.observer import Observer

__all__ = ["LeaseKeeping", "idle_beat_ms"]

log = logging.getLogger("agentmill.worker")


def idle_beat_ms(heartbeat_ms: int, lease_ms: int) -> int:
    """How often a worker with no runs beats: four heartbeats, within a sixth of the lease (so the
    lease is renewed five times before it could run out), never more often than a heartbeat."""
    return max(heartbeat_ms, min(4 * heartbeat_ms, lease_ms // 6))


class LeaseKeeping:
    """What of the worker process keeps its lease and sweeps (mixed into WorkerProcess)."""

    settings: Settings
    lease: WorkerLease
    deps: WorkerDeps
    worker: ResilientWorker
    observer: Observer
    stopping: asyncio.Event
    worker_id: str
    incarnation: int
    watch: RedisWatch
    _unheld_seen: tuple[str, frozenset[tuple[int, str]]] = ("", frozenset())  # (lease id, runs) last sweep

    def _redis_failed(self, what: str, exc: BaseException) -> None:
        """A loop's failed call: a debug line when it belongs to a Redis outage (which the watch logs
        once), else a warning."""
        level = logging.DEBUG if self.watch.in_outage(exc) else logging.WARNING
        log.log(level, "worker %s: %s (%s)", self.worker_id, what, exc)

    async def _until_idle(self) -> None:
        while self.deps.active:  # noqa: ASYNC110 - runs leave the dict from their own tasks; 50 ms is fine at shutdown
            await asyncio.sleep(0.05)

    async def _register(self) -> bool:
        """Take a lease under the current lease id (retrying while Redis is away)."""
        s = self.settings
        while True:
            sent = self.lease.now()
            try:
                b = await beat(
                    self.deps.parts, self.deps.scripts, self.deps.lease_id, s.lease_ms, register=True
                )
            except (RedisError, OSError) as exc:
                self._redis_failed(f"cannot register lease {self.deps.lease_id}; retrying", exc)
                await asyncio.sleep(s.heartbeat_ms / 1000.0)
                continue
            self.lease.renewed(sent)
            self.worker.workers = b.workers
            return True

    async def _heartbeat(self) -> None:
        """One beat per worker: renew its lease and read its abort inbox, O(1) whatever its runs,
        every AGENTMILL_HEARTBEAT_MS while it has runs, every ``idle_beat_ms`` while it has none (a
        run that starts brings the next beat within AGENTMILL_HEARTBEAT_MS). A worker that finds
        itself past its own deadline (or told by Redis that its lease expired) stops its runs
        without writing, hands them to the queue and carries on under a new lease id."""
        s = self.settings
        idle_s, last = idle_beat_ms(s.heartbeat_ms, s.lease_ms) / 1000.0, self.lease.now()
        while True:
            await asyncio.sleep(s.heartbeat_ms / 1000.0)
            if self.lease.expired():
                await self._lease_lost("its lease deadline passed")
                continue
            sent = self.lease.now()
            if not (self.deps.active or self.worker.tasks) and sent - last < idle_s:
                continue  # no runs here: no abort to read, and the lease is far from its end
            last = sent
            try:
                b = await beat(self.deps.parts, self.deps.scripts, self.deps.lease_id, s.lease_ms)
            except (RedisError, OSError) as exc:
                self._redis_failed("heartbeat failed", exc)
                continue
            if failpoints.on("beat_reply_late"):  # Redis renewed the lease; its reply comes 3 leases late
                await asyncio.sleep(3 * s.lease_ms / 1000.0)
            if b.lost:
                await self._lease_lost("Redis reports its lease expired")
                continue
            self.lease.renewed(sent)
            self.worker.workers = b.workers
            for run_id, epoch, reason in b.aborts:
                d = self.deps.active.get(run_id)
                if d is not None and epoch == -1:  # deleted: stop its calls now; it writes nothing more
                    d.fence(deleted=True)
                elif d is not None and d.store.epoch == epoch and reason:
                    d.request_abort(reason)

    async def _lease_lost(self, why: str) -> None:
        """Stop every run here without writing, put them back on the queue, take a new lease id."""
        self.lease.lapse()
        pick = self.worker.allow_pick_jobs
        self.worker.allow_pick_jobs = False
        old = self.deps.lease_id
        log.warning("worker %s: %s; stopping its %d runs without writing", old, why, len(self.deps.active))
        for d in list(self.deps.active.values()):
            d.fence()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._until_idle(), 5.0)
        try:
            self._redispatched(
                await reconcile_worker(
                    self.deps.parts, self.deps.scripts, self.settings, old, expired_only=False
                )
            )
        except (RedisError, OSError) as exc:  # the reconcilers will find the old lease expired
            log.warning("worker %s: could not hand its runs back (%s)", old, exc)
        self.incarnation += 1
        self.deps.lease_id = f"{self.worker_id}~{self.incarnation}"
        await self._register()
        self.worker.allow_pick_jobs = pick and not self.stopping.is_set()
        log.info("worker %s carries on under lease id %s", self.worker_id, self.deps.lease_id)

    def _redispatched(self, verdicts: Counter[str]) -> None:
        for reason in (RedispatchReason.LEASE_EXPIRED, RedispatchReason.JOB_LOST):
            if n := verdicts.get(f"redispatched:{reason}", 0):
                self.observer.runs_redispatched(reason, n)
        if n := verdicts.get("child_delivered", 0):
            self.observer.children_ended(n)

    async def _reconciler(self) -> None:
        s = self.settings
        while True:
            await asyncio.sleep(s.reconcile_ms / 1000.0 * random.uniform(0.8, 1.2))
            try:
                verdicts = await reconcile_once(self.deps.parts, self.deps.scripts, s)
            except (RedisError, OSError) as exc:
                self._redis_failed("reconcile sweep failed", exc)
                continue
            self._redispatched(verdicts)
            try:
                verdicts += await self._unheld()
            except (RedisError, OSError) as exc:
                self._redis_failed("own runs sweep failed", exc)
            moved = {
                k: v for k, v in verdicts.items() if k in ("redispatched", "approval_timeout", "poison_run")
            }
            if moved:
                log.info("reconciler: %s", dict(moved))

    async def _unheld(self) -> Counter[str]:
        """Runs Redis holds under this worker's lease id that no job here drives (a claim that ran
        but whose reply was lost, sent again by the client: its runs stay 'running' under a live
        lease, which no sweep looks past), handed back once found so on two sweeps in a row."""
        lease_id = self.deps.lease_id
        layout = self.deps.parts.layout
        held = set(self.deps.active) | {layout.of_job(j)[1] for j in list(self.worker.tasks)}
        runs = {(p.index, r): p for p, r in await runs_of(self.deps.parts, lease_id) if r not in held}
        last, self._unheld_seen = self._unheld_seen, (lease_id, frozenset(runs))
        due = [(runs[k], k[1]) for k in runs if last[0] == lease_id and k in last[1]]
        if not due or lease_id != self.deps.lease_id:
            return Counter()
        log.warning("worker %s: %d runs held in Redis under its lease and by no job here; handing them back",
                    lease_id, len(due))  # fmt: skip
        got = await hand_back_unheld(self.deps.parts, self.deps.scripts, lease_id, due)
        if n := got.get("unheld:released", 0):
            self.observer.runs_redispatched(RedispatchReason.LEASE_EXPIRED, n)
        return got
