"""The Python producer API: validate RunInputs and enqueue them to arq through atomic scripts.

One run = one run hash + one arq job whose id is the runId, created together in one script, so
submitting the same runId twice yields one run. A batch is one pipelined round trip.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
from pydantic import ValidationError
from redis.asyncio import Redis

from shared import keys, limits
from shared.codec import to_jsonable
from shared.dispatch import JOB_EXPIRE_MS, job_payload, job_ref
from shared.events import decode_entry, stream_id
from shared.models import RunEvent, RunInput, RunResult, RunStatus
from shared.profiles import AgentProfile
from shared.scripts import Scripts, text
from shared.settings import Settings, get_settings

DEFAULT_TENANT = "default"


class SubmissionError(Exception):
    """A run that was not accepted. ``code`` is stable; ``status`` is the HTTP status it maps to."""

    def __init__(self, code: str, message: str, *, status: int = 422, field: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status
        self.field = field

    def as_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.field:
            d["field"] = self.field
        return d


@dataclass(frozen=True, slots=True)
class Submitted:
    run_id: str
    status: str
    created: bool


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
        if self.pending_approvals:
            d["pendingApprovals"] = self.pending_approvals
        return d


def validation_error(exc: ValidationError) -> SubmissionError:
    """Turn pydantic's error into one message naming the field (camelCase path)."""
    parts = []
    first_field = None
    for err in exc.errors()[:5]:
        loc = ".".join(str(p) for p in err["loc"]) or "body"
        first_field = first_field or loc
        parts.append(f"{loc}: {err['msg']}")
    return SubmissionError("invalid_input", "; ".join(parts), field=first_field)


def run_id_for_key(tenant: str, idempotency_key: str) -> str:
    """A client's Idempotency-Key names exactly one run of its tenant."""
    return "run_" + hashlib.sha256(f"{tenant}\0{idempotency_key}".encode()).hexdigest()[:32]


def input_hash(run: RunInput) -> str:
    body = to_jsonable(run)
    body.pop("runId", None)
    return hashlib.sha256(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)).hexdigest()


class Producer:
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

    # ---- submission ----

    def prepare(
        self, raw: RunInput | dict[str, Any], *, tenant: str, idempotency_key: str | None = None
    ) -> RunInput:
        """Validate one input and fix its runId; raises SubmissionError naming the field."""
        if isinstance(raw, RunInput):
            run = raw
        else:
            try:
                run = RunInput.model_validate(raw)
            except ValidationError as exc:
                raise validation_error(exc) from None
        if self.profiles is not None and run.agent not in self.profiles:
            known = ", ".join(sorted(self.profiles))
            raise SubmissionError(
                "unknown_agent", f"agent: no profile named {run.agent!r} (known: {known})", field="agent"
            )
        size = len(orjson.dumps(to_jsonable(run)))
        if size > limits.MAX_RUN_INPUT_BYTES:
            raise SubmissionError(
                "too_large",
                f"the run input is {size} bytes; at most {limits.MAX_RUN_INPUT_BYTES}",
                status=413,
            )
        if run.run_id is None:
            rid = run_id_for_key(tenant, idempotency_key) if idempotency_key else _new_run_id()
            run = run.model_copy(update={"run_id": rid})
        if run.session_id is None and run.auto_create_session:
            run = run.model_copy(update={"session_id": f"ses_{run.run_id}"})
        return run

    def _submit_call(self, run: RunInput, tenant: str, now_ms: int) -> tuple[list[str], list[Any]]:
        rid = run.run_id
        assert rid is not None
        _, job_key = job_ref(rid, 1)
        sid = run.session_id or ""
        k = [keys.run_key(rid), job_key, keys.QUEUE, keys.LIVE, keys.session_key(sid),
             keys.session_queue_key(sid), keys.session_runs_key(sid)]  # fmt: skip
        a: list[Any] = [
            rid,
            orjson.dumps(to_jsonable(run)),
            input_hash(run),
            tenant,
            run.session_id or "",
            job_payload(rid, 1, now_ms),
            JOB_EXPIRE_MS,
            self.settings.queued_check_ms,
            run.webhook or "",
            "1" if run.auto_create_session else "",
            (run.multitask_strategy or "enqueue"),
        ]
        return k, a

    @staticmethod
    def _outcome(run: RunInput, reply: Sequence[Any]) -> Submitted:
        verdict, status = text(reply[0]), text(reply[1])
        rid = run.run_id or ""
        if verdict == "conflict":
            raise SubmissionError(
                "conflict", f"run {rid} already exists with a different input", status=409, field="runId"
            )
        if verdict == "unknown_session":
            raise SubmissionError(
                "unknown_session",
                f"sessionId: no session {run.session_id!r}; set autoCreateSession to create it",
                status=404,
                field="sessionId",
            )
        if verdict == "session_busy":
            raise SubmissionError(
                "session_busy",
                f"session {run.session_id} is running {status} and multitaskStrategy is reject",
                status=409,
                field="multitaskStrategy",
            )
        return Submitted(run_id=rid, status=status, created=verdict == "created")

    async def submit(
        self,
        raw: RunInput | dict[str, Any],
        *,
        tenant: str = DEFAULT_TENANT,
        idempotency_key: str | None = None,
    ) -> Submitted:
        run = self.prepare(raw, tenant=tenant, idempotency_key=idempotency_key)
        k, a = self._submit_call(run, tenant, _now_ms())
        reply = await self.scripts.submit(keys=k, args=a)
        return self._outcome(run, reply)

    async def submit_many(
        self, items: Sequence[RunInput | dict[str, Any]], *, tenant: str = DEFAULT_TENANT
    ) -> list[Submitted | SubmissionError]:
        """Validate every item; enqueue the valid ones in one pipelined round trip, in order."""
        if len(items) > self.settings.max_batch:
            raise SubmissionError(
                "batch_too_large", f"runs: at most {self.settings.max_batch} items per batch", field="runs"
            )
        out: list[Submitted | SubmissionError | None] = [None] * len(items)
        valid: list[tuple[int, RunInput]] = []
        seen: set[str] = set()
        for i, raw in enumerate(items):
            try:
                run = self.prepare(raw, tenant=tenant)
            except SubmissionError as exc:
                exc.field = f"runs.{i}.{exc.field}" if exc.field else f"runs.{i}"
                exc.message = f"runs.{i}: {exc.message}"
                out[i] = exc
                continue
            if run.run_id in seen:
                out[i] = SubmissionError(
                    "duplicate",
                    f"runs.{i}: runId {run.run_id} appears twice in the batch",
                    field=f"runs.{i}.runId",
                )
                continue
            seen.add(run.run_id or "")
            valid.append((i, run))
        if valid:
            now = _now_ms()
            async with self.redis.pipeline(transaction=False) as pipe:
                for _, run in valid:
                    k, a = self._submit_call(run, tenant, now)
                    await self.scripts.submit(keys=k, args=a, client=pipe)
                replies = await pipe.execute(raise_on_error=False)
            for (i, run), reply in zip(valid, replies, strict=True):
                if isinstance(reply, Exception):
                    out[i] = SubmissionError("enqueue_failed", f"runs.{i}: {reply}", status=503)
                    continue
                try:
                    out[i] = self._outcome(run, reply)
                except SubmissionError as exc:
                    out[i] = exc
        return [o for o in out if o is not None]

    # ---- reading ----

    async def get(self, run_id: str, *, tenant: str | None = None) -> RunRecord | None:
        fields = ["status", "tenant", "sessionId", "createdAt", "lastSeq", "result", "approvals", "abort"]
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
        )

    async def read_events(
        self, run_id: str, *, after: int = 0, limit: int = 1000, block_ms: int | None = None
    ) -> list[RunEvent]:
        """Events with seq > after, oldest first; with block_ms, waits for the first one to appear."""
        stream = keys.events_stream(run_id)
        if block_ms is None:
            entries = await self.redis.xrange(stream, min=f"({stream_id(after)}", count=limit)
        else:
            reply = await self.stream_redis.xread({stream: stream_id(after)}, count=limit, block=block_ms)
            entries = reply[0][1] if reply else []
        return [decode_entry(run_id, fields) for _, fields in entries]

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
                run_id, after=rec.last_seq, limit=1, block_ms=max(1, int(min(left, 1.0) * 1000))
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

    async def decide(
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
            reply = await self.scripts.decide(
                keys=[keys.run_key(run_id), keys.LIVE, keys.QUEUE, new_key],
                args=[
                    run_id, tool_call_id, "approved" if approved else "rejected", reason or "", gen, new_job,
                    job_payload(run_id, gen + 1), JOB_EXPIRE_MS, self.settings.queued_check_ms, tenant or "",
                ],
            )  # fmt: skip
            verdict = text(reply[0])
            if verdict != "moved":
                return verdict
            await asyncio.sleep(0.01)
        return "moved"

    async def get_session(self, session_id: str, *, tenant: str | None = None) -> dict[str, Any] | None:
        """The session's runs (in submission order), its active run and its history of run loops."""
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
        return {
            "sessionId": session_id,
            "createdAt": int(h.get("createdAt") or 0),
            "activeRun": h.get("activeRun") or None,
            "runs": [text(r) for r in runs],
            "history": [orjson.loads(lp) for lp in loops],
        }

    async def queue_depth(self) -> int:
        return int(await self.redis.zcard(keys.QUEUE))

    async def gauges(self) -> tuple[int, int]:
        """Queue depth and runs awaiting approval, in one round trip (the API exports both)."""
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.zcard(keys.QUEUE)
            pipe.zcard(keys.AWAITING)
            depth, awaiting = await pipe.execute()
        return int(depth), int(awaiting)


def _now_ms() -> int:
    return int(time.time() * 1000)


def _new_run_id() -> str:
    from shared.ids import new_run_id

    return new_run_id()
