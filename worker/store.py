"""The worker's side of the run's Redis state: acquire, fenced commits, lease renewal, hand-back.

Every write goes through a script that checks the run's epoch, so a stale worker (paused past its
lease, or racing a re-dispatched job) is refused and stops without writing anything.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
from redis.asyncio import Redis

from shared import keys
from shared.dispatch import JOB_EXPIRE_MS, job_payload, job_ref
from shared.scripts import Scripts, text
from shared.settings import Settings


class FencedError(Exception):
    """This worker no longer owns the run; it must stop without writing."""


class SeqConflictError(Exception):
    """The stream's last seq is not what this writer expected (another writer got in)."""


@dataclass(frozen=True, slots=True)
class Acquired:
    epoch: int
    last_seq: int
    checkpoint: bytes | None
    input: bytes
    abort_reason: str
    approvals: dict[str, Any]
    tool_records: dict[str, dict[str, Any]]
    restarts: int


@dataclass(frozen=True, slots=True)
class NotAcquired:
    verdict: str  # missing | terminal | superseded | busy | exhausted
    detail: str = ""


@dataclass(slots=True)
class Outbox:
    """What one commit writes besides the checkpoint."""

    events: list[tuple[str, int, bytes]] = field(default_factory=list)  # kind, ts, payload JSON
    claims: list[str] = field(default_factory=list)
    records: list[tuple[str, bytes]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.events or self.claims or self.records)


@dataclass(frozen=True, slots=True)
class SessionUpdate:
    """Written with a run's terminal commit: its run loop and tool results join the session history."""

    session_id: str
    loop: bytes = b""
    tool_results: list[tuple[str, bytes]] = field(default_factory=list)


def now_ms() -> int:
    return int(time.time() * 1000)


class RunStore:
    """One worker's handle on one run at one epoch. Counts its round trips (for the bench)."""

    def __init__(self, redis: Redis, scripts: Scripts, settings: Settings, run_id: str) -> None:
        self.redis = redis
        self.scripts = scripts
        self.settings = settings
        self.run_id = run_id
        self.epoch = 0
        self.last_seq = 0
        self.round_trips = 0
        self._keys = [keys.run_key(run_id), keys.events_stream(run_id), keys.tools_key(run_id), keys.LIVE]

    async def acquire(self, gen: int, worker_id: str) -> Acquired | NotAcquired:
        s = self.settings
        self.round_trips += 1
        r = await self.scripts.acquire(
            keys=self._keys,
            args=[
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
    ) -> int:
        """Append events, write the checkpoint, claims and tool records, and renew the lease: one round trip."""
        s = self.settings
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
        self.round_trips += 1
        r = await self.scripts.commit(keys=self._keys, args=args)
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
        self.round_trips += 1
        r = await self.scripts.release(
            keys=[keys.run_key(self.run_id), keys.LIVE, keys.QUEUE, new_key],
            args=[self.epoch, self.run_id, gen + 1, new_job, job_payload(self.run_id, gen + 1), JOB_EXPIRE_MS,
                  self.settings.queued_check_ms],
        )  # fmt: skip
        return text(r[0])


async def renew_many(
    redis: Redis, scripts: Scripts, leases: Sequence[tuple[str, int]], lease_ms: int
) -> list[tuple[str, str]]:
    """Renew the leases of all (runId, epoch) pairs in one pipelined round trip.

    Returns (verdict, abort reason) per run: verdict ``fenced`` means the run was taken over.
    """
    if not leases:
        return []
    async with redis.pipeline(transaction=False) as pipe:
        for run_id, epoch in leases:
            await scripts.renew(
                keys=[keys.run_key(run_id), keys.LIVE], args=[epoch, lease_ms, run_id], client=pipe
            )
        replies = await pipe.execute(raise_on_error=False)
    out: list[tuple[str, str]] = []
    for r in replies:
        if isinstance(r, Exception):
            out.append(("error", ""))
        else:
            out.append((text(r[0]), text(r[1])))
    return out
