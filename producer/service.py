"""The producer service in Python: submit runs (producer.submitter), read them and their events, wait
for them, abort them, settle their approvals, post client tool results, read sessions."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import orjson
from redis.asyncio import Redis

from producer.submission import SubmissionError, Submitted, scoped_id
from producer.submitter import Submitter
from shared import keys
from shared.codec import to_jsonable
from shared.dispatch import JOB_EXPIRE_MS, job_payload, job_ref
from shared.events import decode_entry, stream_id
from shared.models import ClientToolResult, RunEvent, RunResult, RunStatus
from shared.profiles import AgentProfile
from shared.quotas import DEFAULT_TENANT
from shared.scripts import Scripts, text
from shared.settings import Settings, get_settings

__all__ = ["DEFAULT_TENANT", "Producer", "RunRecord", "SubmissionError", "Submitted"]


@dataclass(frozen=True, slots=True)
class RunRecord:
    run_id: str
    status: RunStatus
    tenant: str
    session_id: str | None
    created_at_ms: int
    last_seq: int
    result: RunResult | None
    pending_approvals: list[dict[str, Any]] = field(default_factory=list)
    abort_requested: bool = False
    pending_tool_calls: list[dict[str, Any]] = field(default_factory=list)
    key_id: str = ""  # the id its keys use, when not run_id (a tenant-scoped id, see scoped_id)

    @property
    def key(self) -> str:
        return self.key_id or self.run_id

    def as_seen_by(self, client_id: str) -> RunRecord:
        """The record under the id its tenant knows it by."""
        return self if client_id == self.run_id else replace(self, run_id=client_id, key_id=self.key)

    def view(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "runId": self.run_id,
            "status": self.status.value,
            "sessionId": self.session_id,
            "createdAt": self.created_at_ms,
            "lastSeq": self.last_seq,
        }
        if self.result is not None:
            d["result"] = to_jsonable(self.result)
            d["result"]["runId"] = self.run_id
        if self.pending_approvals:
            d["pendingApprovals"] = self.pending_approvals
        if self.pending_tool_calls:
            d["pendingToolCalls"] = self.pending_tool_calls
        return d


class Producer(Submitter):
    """The producer service in Python: submit runs (Submitter), read them, wait for them, control them."""

    def __init__(
        self,
        redis: Redis,
        *,
        settings: Settings | None = None,
        profiles: dict[str, AgentProfile] | None = None,
        stream_redis: Redis | None = None,
    ) -> None:
        self.redis = redis
        self.stream_redis = stream_redis or redis  # blocking reads (XREAD BLOCK) go here
        self.settings = settings or get_settings()
        self.profiles = profiles
        self.scripts = Scripts(
            redis,
            queued_check_ms=self.settings.queued_check_ms,
            stream_maxlen=self.settings.stream_maxlen,
            retention_s=self.settings.retention_s,
        )
        self._many_loaded = False

    # ---- reading ----

    async def get(self, run_id: str, *, tenant: str | None = None) -> RunRecord | None:
        """The run as ``tenant`` knows it by ``run_id`` (its own run, or its run scoped under that
        id when another tenant holds the id); None when the tenant has none."""
        rec = await self._get(run_id, tenant)
        if rec is None and tenant is not None:
            scoped = await self._get(scoped_id(tenant, run_id), tenant)
            return scoped.as_seen_by(run_id) if scoped is not None else None
        return rec

    async def resolve(self, run_id: str, tenant: str) -> str:
        """The id the keys of ``tenant``'s run ``run_id`` use (run_id itself when it has none)."""
        rk = keys.run_key
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hget(rk(run_id), "tenant")
            pipe.hget(rk(scoped_id(tenant, run_id)), "tenant")
            own, scoped = await pipe.execute()
        if own is None or text(own) == tenant or scoped is None or text(scoped) != tenant:
            return run_id
        return scoped_id(tenant, run_id)

    async def _get(self, run_id: str, tenant: str | None) -> RunRecord | None:
        fields = ["status", "tenant", "sessionId", "createdAt", "lastSeq", "result", "approvals", "abort",
                  "clientPending"]  # fmt: skip
        vals = await self.redis.hmget(keys.run_key(run_id), fields)  # type: ignore[misc]
        if vals[0] is None:
            return None
        h = dict(zip(fields, (text(v) if v is not None else None for v in vals), strict=True))
        if tenant is not None and h["tenant"] != tenant:
            return None
        status = RunStatus(h["status"] or RunStatus.QUEUED.value)
        result = RunResult.model_validate_json(h["result"]) if h["result"] else None
        pending: list[dict[str, Any]] = []
        if status == RunStatus.AWAITING_HUMAN and h["approvals"]:
            for call_id, entry in orjson.loads(h["approvals"]).items():
                if entry.get("decision") == "pending":
                    pending.append(
                        {
                            "toolCallId": call_id,
                            "name": entry.get("name"),
                            "arguments": entry.get("arguments"),
                        }
                    )
        calls: list[dict[str, Any]] = []
        if status == RunStatus.AWAITING_TOOLS and h["clientPending"]:
            calls = orjson.loads(h["clientPending"])
            recs = await self.redis.hmget(keys.tools_key(run_id), [c["toolCallId"] for c in calls])  # type: ignore[misc]
            calls = [
                c for c, r in zip(calls, recs, strict=True) if r and orjson.loads(r).get("state") != "done"
            ]
        return RunRecord(
            run_id=run_id,
            status=status,
            tenant=h["tenant"] or "",
            session_id=h["sessionId"] or None,
            created_at_ms=int(h["createdAt"] or 0),
            last_seq=int(h["lastSeq"] or 0),
            result=result,
            pending_approvals=pending,
            abort_requested=bool(h["abort"]),
            pending_tool_calls=calls,
        )

    async def read_events(
        self,
        run_id: str,
        *,
        after: int = 0,
        limit: int = 1000,
        block_ms: int | None = None,
        label: str | None = None,
    ) -> list[RunEvent]:
        """Events with seq > after, oldest first; with block_ms, waits for the first one to appear.
        ``label``: the run id the events carry (the tenant's id of a scoped run)."""
        stream = keys.events_stream(run_id)
        if block_ms is None:
            entries = await self.redis.xrange(stream, min=f"({stream_id(after)}", count=limit)
        else:
            reply = await self.stream_redis.xread({stream: stream_id(after)}, count=limit, block=block_ms)
            entries = reply[0][1] if reply else []
        return [decode_entry(label or run_id, fields) for _, fields in entries]

    async def wait(self, run_id: str, *, timeout_s: float, tenant: str | None = None) -> RunRecord | None:
        """Until the run is terminal or the timeout passes; returns the latest record."""
        deadline = time.monotonic() + timeout_s
        while True:
            rec = await self.get(run_id, tenant=tenant)
            if rec is None or rec.status.terminal:
                return rec
            left = deadline - time.monotonic()
            if left <= 0:
                return rec
            await self.read_events(
                rec.key, after=rec.last_seq, limit=1, block_ms=max(1, int(min(left, 1.0) * 1000))
            )

    # ---- control ----

    async def abort(
        self, run_id: str, *, reason: str = "aborted by request", tenant: str | None = None
    ) -> str:
        """unknown | finished | aborted (was queued or awaiting approval) | requested (its worker stops it)."""
        s = self.settings
        reply = await self.scripts.abort(
            keys=[keys.run_key(run_id), keys.events_stream(run_id), keys.tools_key(run_id), keys.LIVE],
            args=[run_id, reason, s.stream_maxlen, s.retention_s, tenant or ""],
        )
        return text(reply[0])

    async def settle_approval(
        self,
        run_id: str,
        tool_call_id: str,
        *,
        approved: bool,
        reason: str | None = None,
        tenant: str | None = None,
    ) -> str:
        """Record one approval decision; the last one re-enqueues the run. Returns the script verdict."""
        for _ in range(5):
            gen_raw = await self.redis.hget(keys.run_key(run_id), "gen")  # type: ignore[misc]
            if gen_raw is None:
                return "unknown_run"
            gen = int(gen_raw)
            new_job, new_key = job_ref(run_id, gen + 1)
            reply = await self.scripts.settle_approval(
                keys=[keys.run_key(run_id), keys.LIVE, keys.QUEUE, new_key, keys.events_stream(run_id),
                      keys.tools_key(run_id)],
                args=[
                    run_id, tool_call_id, "approved" if approved else "rejected", reason or "", gen, new_job,
                    job_payload(run_id, gen + 1), JOB_EXPIRE_MS, self.settings.queued_check_ms, tenant or "",
                    self.settings.stream_maxlen, self.settings.retention_s,
                ],
            )  # fmt: skip
            verdict = text(reply[0])
            if verdict != "moved":
                return verdict
            await asyncio.sleep(0.01)
        return "moved"

    async def post_tool_results(
        self, run_id: str, results: Sequence[ClientToolResult], *, tenant: str | None = None
    ) -> tuple[str, str, list[str]]:
        """Record results of client tool calls, all or none. Returns (verdict, toolCallId, per-result
        verdicts): recorded | resumed (the run went back on the queue), each result recorded | duplicate;
        or unknown_run | finished | unknown_call | not_client | conflict | timed_out naming the call."""
        args: list[Any] = [run_id, tenant or "", len(results)]
        for r in results:
            args += [r.tool_call_id, r.content, "1" if r.is_error else ""]
        reply = await self.scripts.tool_results(
            keys=[keys.run_key(run_id), keys.tools_key(run_id)], args=args
        )
        verdict = text(reply[0])
        if verdict in ("recorded", "resumed"):
            return verdict, "", [text(v) for v in reply[1:]]
        return verdict, text(reply[1]) if len(reply) > 1 else "", []

    async def get_session(self, session_id: str, *, tenant: str | None = None) -> dict[str, Any] | None:
        """The session's runs (in submission order), its active run and its history of run loops;
        the tenant's session scoped under this id when another tenant holds it."""
        found = await self._get_session(session_id, tenant)
        if found is None and tenant is not None:
            found = await self._get_session(scoped_id(tenant, session_id), tenant)
            if found is not None:
                found["sessionId"] = session_id
        return found

    async def _get_session(self, session_id: str, tenant: str | None) -> dict[str, Any] | None:
        sk = keys.session_key(session_id)
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hgetall(sk)
            pipe.lrange(keys.session_runs_key(session_id), 0, -1)
            pipe.lrange(keys.session_history_key(session_id), -100, -1)
            meta, runs, loops = await pipe.execute()
        if not meta:
            return None
        h = {text(k): text(v) for k, v in meta.items()}
        if tenant is not None and h.get("tenant") != tenant:
            return None
        runs = [text(r) for r in runs]
        shown = await self.client_ids([*runs, h.get("activeRun") or ""])
        active = h.get("activeRun") or None
        return {
            "sessionId": session_id,
            "createdAt": int(h.get("createdAt") or 0),
            "activeRun": shown.get(active, active) if active else None,
            "runs": [shown.get(r, r) for r in runs],
            "history": [orjson.loads(lp) for lp in loops],
        }

    async def client_ids(self, run_ids: Sequence[str]) -> dict[str, str]:
        """The ids the clients chose for those of ``run_ids`` that are tenant-scoped (``tsc_…``); one
        round trip, and none when there are no such ids."""
        scoped = sorted({r for r in run_ids if r.startswith("tsc_")})
        if not scoped:
            return {}
        async with self.redis.pipeline(transaction=False) as pipe:
            for r in scoped:
                pipe.hget(keys.run_key(r), "clientId")
            found = await pipe.execute()
        return {r: text(c) for r, c in zip(scoped, found, strict=True) if c}

    async def queue_depth(self) -> int:
        return int(await self.redis.zcard(keys.QUEUE))

    async def gauges(self) -> tuple[int, int]:
        """Queue depth and runs awaiting approval, in one round trip (the API exports both)."""
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.zcard(keys.QUEUE)
            pipe.zcard(keys.AWAITING)
            depth, awaiting = await pipe.execute()
        return int(depth), int(awaiting)
