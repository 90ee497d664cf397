"""The ports of worker/ports.py on Redis: a run's store (acquire, fenced commits, hand-back), a session's
history and recall; and the worker beat.

Every write goes through a script that checks the run's epoch and that the writing worker's lease is
unexpired, so a stale worker (paused past its lease, or racing a re-dispatched job) is refused and
stops without writing anything. The worker also checks its own lease deadline (worker.lease) before
it sends a write, so it does not even try once it knows it is late.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson
from redis.asyncio import Redis
from redis.commands.core import AsyncScript

from shared import keys
from shared.dispatch import JOB_EXPIRE_MS, job_payload, job_ref
from shared.models import Message, ToolCall, ToolResult
from shared.profiles import ContextConfig
from shared.scripts import Scripts, text
from shared.settings import Settings
from worker import context, sessions
from worker.batcher import ScriptBatcher
from worker.lease import WorkerLease
from worker.ports import Acquired, Clock, FencedError, NotAcquired, Outbox, SeqConflictError, SessionUpdate

__all__ = ["Beat", "RedisRunStore", "RedisSessionStore", "beat", "forget_worker"]


class RedisRunStore:
    """RunStore: one worker's handle on one run at one epoch. Counts its round trips (for the bench)."""

    def __init__(
        self,
        redis: Redis,
        scripts: Scripts,
        settings: Settings,
        run_id: str,
        lease: WorkerLease | None = None,
        batcher: ScriptBatcher | None = None,
    ) -> None:
        self.redis = redis
        self.lease = lease
        self.batcher = batcher
        self.scripts = scripts
        self.settings = settings
        self.run_id = run_id
        self.epoch = 0
        self.last_seq = 0
        self.round_trips = 0
        self._keys = [keys.run_key(run_id), keys.events_stream(run_id), keys.tools_key(run_id), keys.LIVE]

    async def _run(self, script: AsyncScript, keys: list[Any], args: list[Any]) -> Any:
        if self.batcher is not None:
            return await self.batcher.call(script, keys, args)
        return await script(keys=keys, args=args)

    def _check_lease(self) -> None:
        if self.lease is not None and self.lease.expired():
            raise FencedError(f"run {self.run_id}: this worker is past its lease deadline")

    async def acquire(self, gen: int, worker_id: str) -> Acquired | NotAcquired:
        """``worker_id`` is the worker's lease id (keys.WORKERS); the run joins its runs set."""
        s = self.settings
        if self.lease is not None and self.lease.expired():
            return NotAcquired("no_lease", "this worker is past its lease deadline")
        self.round_trips += 1
        r = await self._run(
            self.scripts.acquire,
            self._keys,
            [
                self.run_id,
                gen,
                worker_id,
                s.lease_ms,
                s.max_crash_restarts,
                s.stream_maxlen,
                s.retention_s,
            ],
        )
        verdict = text(r[0])
        if verdict != "ok":
            return NotAcquired(verdict, text(r[1]) if len(r) > 1 else "")
        self.epoch = int(text(r[1]))
        self.last_seq = int(text(r[2]) or 0)
        flat = r[7]
        records = {text(flat[i]): orjson.loads(flat[i + 1]) for i in range(0, len(flat), 2)}
        return Acquired(
            epoch=self.epoch,
            last_seq=self.last_seq,
            checkpoint=r[3] or None,
            input=r[4],
            abort_reason=text(r[5]),
            approvals=orjson.loads(r[6]) if r[6] else {},
            tool_records=records,
            restarts=int(text(r[8])),
        )

    async def commit(
        self,
        outbox: Outbox,
        *,
        checkpoint: bytes | None = None,
        status: str = "",
        aux: bytes = b"",
        session: SessionUpdate | None = None,
        approval_timeout_ms: int | None = None,
        run_deadline_ms: int | None = None,
        iterations: int | None = None,
    ) -> int:
        """Append events, write the checkpoint, claims and tool records: one round trip."""
        s = self.settings
        self._check_lease()
        first = self.last_seq + 1
        args: list[Any] = [
            self.epoch, first, s.stream_maxlen, s.retention_s, s.lease_ms, self.run_id, status, aux,
            checkpoint or b"", len(outbox.events),
        ]  # fmt: skip
        for kind, ts, payload in outbox.events:
            args += [kind, ts, payload]
        args.append(len(outbox.claims))
        args += outbox.claims
        args.append(len(outbox.records))
        for call_id, rec in outbox.records:
            args += [call_id, rec]
        if session is None:
            args += ["", "", 0]
        else:
            args += [session.session_id, session.loop, len(session.tool_results)]
            for call_id, res in session.tool_results:
                args += [call_id, res]
        args.append("" if approval_timeout_ms is None else approval_timeout_ms)
        args.append("" if run_deadline_ms is None else run_deadline_ms)
        args.append("" if iterations is None else iterations)
        self.round_trips += 1
        r = await self._run(self.scripts.commit, self._keys, args)
        verdict = text(r[0])
        if verdict == "fenced" or verdict == "missing":
            raise FencedError(f"run {self.run_id}: epoch {self.epoch} is no longer current ({verdict})")
        if verdict == "seq_conflict":
            raise SeqConflictError(
                f"run {self.run_id}: expected last seq {first - 1}, stream has {text(r[1])}"
            )
        self.last_seq = int(text(r[1]))
        return self.last_seq

    async def release(self, gen: int) -> str:
        """Hand the run back: it goes straight back on the queue as dispatch gen + 1."""
        new_job, new_key = job_ref(self.run_id, gen + 1)
        self._check_lease()
        self.round_trips += 1
        r = await self.scripts.release(
            keys=[keys.run_key(self.run_id), keys.LIVE, keys.QUEUE, new_key],
            args=[self.epoch, self.run_id, gen + 1, new_job, job_payload(self.run_id, gen + 1), JOB_EXPIRE_MS,
                  self.settings.queued_check_ms],
        )  # fmt: skip
        return text(r[0])


class RedisSessionStore:
    """SessionStore: a session's run loops (a list) and past tool results (a hash), read raw."""

    def __init__(self, redis: Redis, clock: Clock) -> None:
        self.redis = redis
        self.clock = clock

    async def load_history(self, session_id: str | None, cfg: ContextConfig) -> list[Message]:
        """The reduced past run loops of the session (seed 002)."""
        if session_id is None:
            return []
        key = keys.session_history_key(session_id)
        raw = await self.redis.lrange(key, -max(cfg.max_run_loops, 1), -1)  # type: ignore[misc]
        loops = [context.RunLoop.model_validate_json(r) for r in raw]
        return context.reduce_history(loops, cfg, self.clock.now_ms())

    async def recall(self, session_id: str | None, call: ToolCall, run_id: str | None = None) -> ToolResult:
        """The internal recall_tool_call tool: a tool result by its id, from this run's own calls
        (compacted away or not) or else from the session's past runs."""
        wanted = sessions.recall_id(call)
        raw = None
        if run_id is not None and wanted:
            rec = await self.redis.hget(keys.tools_key(run_id), wanted)  # type: ignore[misc]
            raw = sessions.recorded_result(rec) if rec is not None else None
        if raw is None and session_id is not None and wanted:
            raw = await self.redis.hget(keys.session_tool_results_key(session_id), wanted)  # type: ignore[misc]
        return sessions.recalled(call, wanted, raw)


@dataclass(frozen=True, slots=True)
class Beat:
    """A heartbeat's answer: ``lost`` if the lease had already expired (not renewed); else the abort
    requests waiting in the worker's inbox as (runId, epoch, reason)."""

    lost: bool
    aborts: list[tuple[str, int, str]] = field(default_factory=list)


async def beat(
    redis: Redis,
    scripts: Scripts,
    lease_id: str,
    lease_ms: int,
    *,
    register: bool = False,
    max_messages: int = 200,
) -> Beat:
    """One worker heartbeat: one script, O(1) whatever the number of runs the worker holds."""
    r = await scripts.beat(
        keys=[keys.WORKERS, keys.worker_inbox_key(lease_id)],
        args=[lease_id, lease_ms, max_messages, "1" if register else ""],
        client=redis,
    )
    if text(r[0]) == "lost":
        return Beat(lost=True)
    return Beat(
        lost=False,
        aborts=[(text(r[i]), int(text(r[i + 1]) or 0), text(r[i + 2])) for i in range(1, len(r), 3)],
    )


async def forget_worker(redis: Redis, scripts: Scripts, lease_id: str, *, only_if_expired: bool) -> str:
    """Drop a worker's lease entry (and its runs set and inbox once the set is empty)."""
    r = await scripts.forget_worker(
        keys=[keys.WORKERS, keys.worker_runs_key(lease_id), keys.worker_inbox_key(lease_id)],
        args=[lease_id, "1" if only_if_expired else ""],
        client=redis,
    )
    return text(r[0])
