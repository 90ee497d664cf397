"""The Python producer API: validate RunInputs and enqueue them to arq through atomic scripts.

One run = one run hash + one arq job whose id is the runId, created together in one script, so
submitting the same runId twice yields one run. A batch is one pipelined round trip.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import orjson
from pydantic import ValidationError
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from shared import keys, limits
from shared.clock import now_ms
from shared.codec import to_jsonable
from shared.dispatch import JOB_EXPIRE_MS, job_payload, job_ref
from shared.events import decode_entry, stream_id
from shared.ids import new_run_id
from shared.models import ClientToolResult, RunEvent, RunInput, RunResult, RunStatus
from shared.profiles import AgentProfile
from shared.quotas import DEFAULT_TENANT, Quota
from shared.scripts import Scripts, text
from shared.settings import Settings, get_settings

__all__ = [
    "ADMIT_GRACE_MS",
    "DEFAULT_TENANT",
    "SUBMIT_CHUNK",
    "Producer",
    "RunRecord",
    "SubmissionError",
    "Submitted",
    "batch_run_prefix",
    "input_hash",
    "meta_term",
    "meta_terms",
    "run_id_for_key",
    "scoped_id",
    "validation_error",
]

ADMIT_GRACE_MS = (
    60_000  # a counted run whose hash never appeared (refused at submit) stops counting after this
)


class SubmissionError(Exception):
    """A run that was not accepted. ``code`` is stable; ``status`` is the HTTP status it maps to."""

    def __init__(
        self,
        code: str,
        message: str,
        *,
        status: int = 422,
        field: str | None = None,
        retry_after_s: int | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status
        self.field = field
        self.retry_after_s = retry_after_s

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


def scoped_id(tenant: str, client_id: str) -> str:
    """The id a tenant's run or session takes when its own id is held by another tenant: ids are
    scoped by tenant, so another tenant's id answers like a free one and cannot be squatted."""
    return "tsc_" + hashlib.sha256(f"{tenant}\0{client_id}".encode()).hexdigest()[:40]


class _ForeignRunError(SubmissionError):
    """The runId is held by another tenant (a 409 only if the scoped id is held as well)."""


class _ForeignSessionError(SubmissionError):
    """The sessionId is held by another tenant."""


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


def batch_run_prefix(tenant: str, batch_id: str) -> str:
    """A batch names its runs too: item ``i`` of it is always run ``<prefix><i>`` (unique per tenant
    and batch, as run_id_for_key's ids are per tenant and key)."""
    return "run_" + hashlib.sha256(f"{tenant}\0batch\0{batch_id}".encode()).hexdigest()[:32] + "_"


def meta_terms(metadata: dict[str, Any] | None) -> list[str]:
    """The ``key=value`` terms a run's metadata is listed under: scalar values of the first
    MAX_META_TERMS keys (bools as true/false, numbers as JSON), keys and values bounded in length."""
    out: list[str] = []
    for k, v in (metadata or {}).items():
        if len(out) >= limits.MAX_META_TERMS:
            break
        term = meta_term(k, v)
        if term is not None:
            out.append(term)
    return out


def meta_term(key: str, value: Any) -> str | None:
    if isinstance(value, bool):
        v = "true" if value else "false"
    elif isinstance(value, int | float):
        v = orjson.dumps(value).decode()
    elif isinstance(value, str):
        v = value
    else:
        return None
    if len(key) > limits.MAX_META_KEY_CHARS or len(v) > limits.MAX_META_VALUE_CHARS:
        return None
    return f"{key}={v}"


@dataclass(frozen=True, slots=True)
class _Prepared:
    """One valid run, encoded once for its submit script."""

    run: RunInput
    run_id: str
    session_id: str
    body: bytes
    digest: str


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
        self._many_loaded = False

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
        if self.profiles is not None and run.client_tools:
            problem = self.profiles[run.agent].client_tool_problem(run.client_tools)
            if problem is not None:
                raise SubmissionError("client_tool_not_allowed", problem, field=problem.split(":", 1)[0])
        size = len(orjson.dumps(to_jsonable(run)))
        if size > limits.MAX_RUN_INPUT_BYTES:
            raise SubmissionError(
                "too_large",
                f"the run input is {size} bytes; at most {limits.MAX_RUN_INPUT_BYTES}",
                status=413,
            )
        if run.run_id is None:
            rid = run_id_for_key(tenant, idempotency_key) if idempotency_key else new_run_id()
            run = run.model_copy(update={"run_id": rid})
        if run.session_id is None and run.auto_create_session:
            run = run.model_copy(update={"session_id": f"ses_{run.run_id}"})
        return run

    def _prepare_encoded(
        self, raw: RunInput | dict[str, Any], tenant: str, default_id: str | None
    ) -> _Prepared:
        """prepare(), with the body serialized once (size check, stored input, input hash)."""
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
        body = to_jsonable(run)
        rid = body.pop("runId", None) or default_id or new_run_id()
        if run.session_id is None and run.auto_create_session:
            body["sessionId"] = f"ses_{rid}"
        canonical = orjson.dumps(body, option=orjson.OPT_SORT_KEYS)
        if len(canonical) > limits.MAX_RUN_INPUT_BYTES:
            raise SubmissionError(
                "too_large",
                f"the run input is {len(canonical)} bytes; at most {limits.MAX_RUN_INPUT_BYTES}",
                status=413,
            )
        digest = hashlib.sha256(canonical).hexdigest()
        body["runId"] = rid
        return _Prepared(run, rid, body.get("sessionId") or "", orjson.dumps(body), digest)

    def _submit_call(
        self, run: RunInput, tenant: str, now_ms: int, *, client_id: str = "", batch_id: str = ""
    ) -> tuple[list[str], list[Any]]:
        """SUBMIT's keys and arguments; ``client_id``: the id the client chose, when ``run`` carries
        its tenant-scoped id (views show it)."""
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
            batch_id,
            run.agent,
            *_counted(meta_terms(run.metadata)),
            client_id if client_id != rid else "",
        ]
        return k, a

    @staticmethod
    def _outcome(run: RunInput, reply: Sequence[Any], run_id: str | None = None) -> Submitted:
        verdict, status = text(reply[0]), text(reply[1])
        rid = run_id or run.run_id or ""
        if verdict == "conflict":
            cls = _ForeignRunError if status == "" else SubmissionError  # '' : another tenant's run
            raise cls(
                "conflict", f"run {rid} already exists with a different input", status=409, field="runId"
            )
        if verdict == "unknown_session" and run.auto_create_session and run.session_id:
            raise _ForeignSessionError(  # it would have been created: another tenant holds the id
                "unknown_session", f"sessionId: no session {run.session_id!r}", status=404, field="sessionId"
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

    async def admit(self, tenant: str, run_ids: list[str], quota: Quota | None) -> None:
        """Count the runs against the tenant's maxActive and submitsPerSecond quotas, or raise 429."""
        if quota is None or not run_ids or (quota.max_active == 0 and quota.submits_per_second == 0):
            return
        now = now_ms()
        reply = await self.scripts.admit_tenant(
            keys=[keys.tenant_active_key(tenant), keys.tenant_rate_key(tenant, now // 1000)],
            args=[now, quota.max_active, quota.submits_per_second, self.settings.retention_s * 1000,
                  ADMIT_GRACE_MS, *run_ids],
        )  # fmt: skip
        verdict = text(reply[0])
        if verdict == "rate_limited":
            raise SubmissionError(
                "rate_limited",
                f"this tenant may submit {quota.submits_per_second} runs per second; retry in a second",
                status=429,
                retry_after_s=1,
            )
        if verdict == "full":
            raise SubmissionError(
                "quota_exceeded",
                f"this tenant has {text(reply[1])} queued and running runs and may have {quota.max_active}; "
                "retry when some have finished",
                status=429,
                retry_after_s=5,
            )

    async def submit(
        self,
        raw: RunInput | dict[str, Any],
        *,
        tenant: str = DEFAULT_TENANT,
        idempotency_key: str | None = None,
        quota: Quota | None = None,
    ) -> Submitted:
        run = self.prepare(raw, tenant=tenant, idempotency_key=idempotency_key)
        await self.admit(tenant, [run.run_id or ""], quota)
        return await self._submit_scoped(run, tenant)

    async def _submit_scoped(self, run: RunInput, tenant: str, batch_id: str = "") -> Submitted:
        """Submit; a runId or sessionId that another tenant holds is replaced by its scoped id."""
        client_id = run.run_id or ""
        scoped: set[str] = set()
        while True:
            k, a = self._submit_call(run, tenant, now_ms(), client_id=client_id, batch_id=batch_id)
            reply = await self.scripts.submit(keys=k, args=a)
            try:
                sub = self._outcome(run, reply)
            except _ForeignRunError:
                if "run" in scoped:
                    raise
                scoped.add("run")
                run = run.model_copy(update={"run_id": scoped_id(tenant, client_id)})
                continue
            except _ForeignSessionError:
                if "session" in scoped:
                    raise
                scoped.add("session")
                run = run.model_copy(update={"session_id": scoped_id(tenant, run.session_id or "")})
                continue
            return Submitted(run_id=client_id, status=sub.status, created=sub.created)

    def check_batch_size(self, n: int) -> None:
        """The batch limit (AGENTMILL_MAX_BATCH), for the API and the Python API alike: 413 past it."""
        if n > self.settings.max_batch:
            raise SubmissionError(
                "batch_too_large",
                f"runs: at most {self.settings.max_batch} items per batch",
                status=413,
                field="runs",
            )

    async def submit_many(
        self,
        items: Sequence[RunInput | dict[str, Any]],
        *,
        tenant: str = DEFAULT_TENANT,
        batch_id: str | None = None,
        offset: int = 0,
        batch_webhook: str | None = None,
        quota: Quota | None = None,
    ) -> list[Submitted | SubmissionError]:
        """Validate every item and enqueue the valid ones, in order: one script call per chunk of
        SUBMIT_CHUNK runs, each chunk sent as soon as it is ready on one connection, so Redis runs a
        chunk while the next one is validated, and all replies are read at the end. With
        ``batch_id`` the runs form a batch (producer.listing); items without a runId then get one
        derived from (batch, offset + index), so sending the same batch again creates nothing new."""
        self.check_batch_size(len(items))
        out: list[Submitted | SubmissionError | None] = [None] * len(items)
        chunks: list[list[tuple[int, _Prepared]]] = [[]]
        seen: set[str] = set()
        prefix = batch_run_prefix(tenant, batch_id) if batch_id else None
        defaults = [f"{prefix}{offset + i}" if prefix else new_run_id() for i in range(len(items))]
        # The tenant's quota admits the whole request at once, in one call that Redis runs while
        # the first chunk is validated; nothing is sent before it answers (a check per chunk would
        # wait for Redis to finish the previous chunk every time). Items that then fail validation
        # were counted and are forgotten after ADMIT_GRACE_MS, as any refused submission.
        claimed = [_claimed_id(raw) or d for raw, d in zip(items, defaults, strict=True)]
        admission = asyncio.ensure_future(self.admit(tenant, claimed, quota))
        await asyncio.sleep(0)  # let it go out

        def refused(exc: SubmissionError) -> list[Submitted | SubmissionError]:
            return [
                SubmissionError(exc.code, f"runs.{i}: {exc.message}", status=exc.status, field=f"runs.{i}",
                                retry_after_s=exc.retry_after_s)
                for i in range(len(items))
            ]  # fmt: skip

        async with _ChunkSender(self, tenant, batch_id or "", batch_webhook or "") as sender:
            try:
                for i, raw in enumerate(items):
                    try:
                        prep = self._prepare_encoded(raw, tenant, defaults[i])
                    except SubmissionError as exc:
                        exc.field = f"runs.{i}.{exc.field}" if exc.field else f"runs.{i}"
                        exc.message = f"runs.{i}: {exc.message}"
                        out[i] = exc
                        continue
                    if prep.run_id in seen:
                        out[i] = SubmissionError(
                            "duplicate",
                            f"runs.{i}: runId {prep.run_id} appears twice in the batch",
                            field=f"runs.{i}.runId",
                        )
                        continue
                    seen.add(prep.run_id)
                    chunks[-1].append((i, prep))
                    if len(chunks[-1]) == SUBMIT_CHUNK:
                        await admission  # raises the quota's refusal before anything is sent
                        await sender.send([p for _, p in chunks[-1]])
                        chunks.append([])
                await admission
            except SubmissionError as exc:
                return refused(exc)
            finally:
                if not admission.done():  # an unexpected error while validating: do not leave it
                    admission.cancel()
            if chunks[-1]:
                await sender.send([p for _, p in chunks[-1]])
            else:
                chunks.pop()
            answers = await sender.replies()
        for chunk, answer in zip(chunks, answers, strict=True):
            for k, (i, prep) in enumerate(chunk):
                if isinstance(answer, Exception):
                    out[i] = SubmissionError("enqueue_failed", f"runs.{i}: {answer}", status=503)
                    continue
                try:
                    out[i] = self._outcome(prep.run, answer[2 * k : 2 * k + 2], prep.run_id)
                except (_ForeignRunError, _ForeignSessionError):  # rare: again alone, scoped
                    run = prep.run.model_copy(update={"run_id": prep.run_id})
                    try:
                        out[i] = await self._submit_scoped(run, tenant, batch_id or "")
                    except SubmissionError as exc:
                        out[i] = exc
                except SubmissionError as exc:
                    out[i] = exc
        return [o for o in out if o is not None]

    def _submit_many_args(
        self, chunk: list[_Prepared], tenant: str, batch_id: str, batch_webhook: str
    ) -> list[Any]:
        spec = [
            [p.run_id, p.digest, p.session_id, p.run.webhook or "", "1" if p.run.auto_create_session else "",
             p.run.multitask_strategy or "enqueue", p.run.agent, meta_terms(p.run.metadata)]
            for p in chunk
        ]  # fmt: skip
        s = self.settings
        return [tenant, batch_id, batch_webhook, JOB_EXPIRE_MS, s.queued_check_ms, orjson.dumps(spec)] + [
            p.body for p in chunk
        ]

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


SUBMIT_CHUNK = 100  # runs per SUBMIT_MANY call: small enough that Redis runs one while the next is prepared


class _ChunkSender:
    """Writes SUBMIT_MANY calls on one connection as they are ready and reads the replies at the end
    (a pipeline whose commands go out early). A chunk answered NOSCRIPT (Redis lost its script
    cache) or left unanswered by a connection error is sent again through the ordinary client, which
    loads the script and retries: SUBMIT is idempotent per runId."""

    def __init__(self, producer: Producer, tenant: str, batch_id: str, batch_webhook: str) -> None:
        self.p, self.tenant, self.batch_id, self.batch_webhook = producer, tenant, batch_id, batch_webhook
        self.sent: list[list[Any]] = []
        self.conn: Any = None
        self.broken = False

    async def __aenter__(self) -> _ChunkSender:
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.conn is not None:
            if self.broken or exc[0] is not None:
                await self.conn.disconnect()
            await self.p.redis.connection_pool.release(self.conn)

    async def send(self, chunk: list[_Prepared]) -> None:
        args = self.p._submit_many_args(chunk, self.tenant, self.batch_id, self.batch_webhook)
        self.sent.append(args)
        if self.broken:
            return
        try:
            if self.conn is None:
                if not self.p._many_loaded:
                    await self.p.redis.script_load(self.p.scripts.submit_many.script)
                    self.p._many_loaded = True
                self.conn = await self.p.redis.connection_pool.get_connection()
            await self.conn.send_command("EVALSHA", self.p.scripts.submit_many.sha, 0, *args)
        except (RedisConnectionError, RedisTimeoutError, OSError):
            self.broken = True

    async def replies(self) -> list[Any]:
        out: list[Any] = []
        for args in self.sent:
            if not self.broken:
                try:
                    out.append(await self.conn.read_response(disconnect_on_error=True))
                    continue
                except NoScriptError:
                    pass  # sent again below, through the client that loads the script
                except ResponseError as exc:
                    out.append(exc)
                    continue
                except (RedisConnectionError, RedisTimeoutError, OSError):
                    self.broken = True
            try:
                out.append(await self.p.scripts.submit_many(args=args))
            except RedisError as exc:
                out.append(exc)
        return out


def _claimed_id(raw: RunInput | dict[str, Any]) -> str | None:
    """The runId an item names, before it is validated (quota admission counts it by this id)."""
    rid = raw.run_id if isinstance(raw, RunInput) else raw.get("runId") if isinstance(raw, dict) else None
    return rid if isinstance(rid, str) and rid else None


def _counted(items: list[str]) -> list[Any]:
    return [len(items), *items]
