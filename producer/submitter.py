"""Submitting runs: validate RunInputs and enqueue them to arq through atomic scripts (the submission
half of producer.service.Producer).

One run = one run hash + one arq job whose id is the runId, created together in one script, so
submitting the same runId twice yields one run. A batch is one pipelined round trip.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Sequence
from typing import Any

import orjson
from pydantic import ValidationError
from redis.asyncio import Redis

from producer.chunks import ChunkSender
from producer.submission import (
    ForeignRunError,
    ForeignSessionError,
    Prepared,
    SubmissionError,
    Submitted,
    batch_run_prefix,
    claimed_id,
    counted,
    input_hash,
    meta_terms,
    run_id_for_key,
    scoped_id,
    validation_error,
)
from shared import keys, limits
from shared.clock import now_ms
from shared.codec import to_jsonable
from shared.dispatch import JOB_EXPIRE_MS, job_payload, job_ref
from shared.ids import new_run_id
from shared.models import RunInput
from shared.profiles import AgentProfile
from shared.quotas import DEFAULT_TENANT, Quota
from shared.scripts import Scripts, text
from shared.settings import Settings

__all__ = ["ADMIT_GRACE_MS", "SUBMIT_CHUNK", "Submitter"]

ADMIT_GRACE_MS = (
    60_000  # a counted run whose hash never appeared (refused at submit) stops counting after this
)


class Submitter:
    """Submission: one run (``submit``) or many (``submit_many``), counted against the tenant's quota."""

    redis: Redis
    settings: Settings
    profiles: dict[str, AgentProfile] | None
    scripts: Scripts
    _many_loaded: bool

    def _validated(self, raw: RunInput | dict[str, Any]) -> RunInput:
        """The input as a RunInput of a known agent; else SubmissionError naming the field."""
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
        return run

    def prepare(
        self, raw: RunInput | dict[str, Any], *, tenant: str, idempotency_key: str | None = None
    ) -> RunInput:
        """Validate one input and fix its runId; raises SubmissionError naming the field."""
        run = self._validated(raw)
        _check_size(len(orjson.dumps(to_jsonable(run))))
        if run.run_id is None:
            rid = run_id_for_key(tenant, idempotency_key) if idempotency_key else new_run_id()
            run = run.model_copy(update={"run_id": rid})
        if run.session_id is None and run.auto_create_session:
            run = run.model_copy(update={"session_id": f"ses_{run.run_id}"})
        return run

    def _prepare_encoded(
        self, raw: RunInput | dict[str, Any], tenant: str, default_id: str | None
    ) -> Prepared:
        """prepare(), with the body serialized once (size check, stored input, input hash)."""
        run = self._validated(raw)
        body = to_jsonable(run)
        rid = body.pop("runId", None) or default_id or new_run_id()
        if run.session_id is None and run.auto_create_session:
            body["sessionId"] = f"ses_{rid}"
        canonical = orjson.dumps(body, option=orjson.OPT_SORT_KEYS)
        _check_size(len(canonical))
        digest = hashlib.sha256(canonical).hexdigest()
        body["runId"] = rid
        return Prepared(run, rid, body.get("sessionId") or "", orjson.dumps(body), digest)

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
            *counted(meta_terms(run.metadata)),
            client_id if client_id != rid else "",
        ]
        return k, a

    @staticmethod
    def _outcome(run: RunInput, reply: Sequence[Any], run_id: str | None = None) -> Submitted:
        verdict, status = text(reply[0]), text(reply[1])
        rid = run_id or run.run_id or ""
        if verdict == "conflict":
            cls = ForeignRunError if status == "" else SubmissionError  # '' : another tenant's run
            raise cls(
                "conflict", f"run {rid} already exists with a different input", status=409, field="runId"
            )
        if verdict == "unknown_session" and run.auto_create_session and run.session_id:
            raise ForeignSessionError(  # it would have been created: another tenant holds the id
                "unknown_session", f"sessionId: no session {run.session_id!r}", status=404, field="sessionId"
            )
        if verdict == "unknown_session":
            raise SubmissionError(
                "unknown_session",
                f"sessionId: no session {run.session_id!r}; set autoCreateSession to create it",
                status=404,
                field="sessionId",
            )
        if verdict == "batch_finished":
            raise SubmissionError(
                "batch_finished",
                "the batch has finished (its last part came without more: true) and takes no new runs",
                status=409,
                field="batchId",
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
            except ForeignRunError:
                if "run" in scoped:
                    raise
                scoped.add("run")
                run = run.model_copy(update={"run_id": scoped_id(tenant, client_id)})
                continue
            except ForeignSessionError:
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
        more: bool = False,
    ) -> list[Submitted | SubmissionError]:
        """Validate every item and enqueue the valid ones, in order: one script call per chunk of
        SUBMIT_CHUNK runs, each chunk sent as soon as it is ready on one connection, so Redis runs a
        chunk while the next one is validated, and all replies are read at the end. With
        ``batch_id`` the runs form a batch (producer.listing); items without a runId then get one
        derived from (batch, offset + index), so sending the same batch again creates nothing new.
        ``more``: more parts of the batch follow, so it cannot finish yet; a request without it closes
        the batch, which then finishes (and fires its webhook, once) when its runs have all ended."""
        self.check_batch_size(len(items))
        out: list[Submitted | SubmissionError | None] = [None] * len(items)
        chunks: list[list[tuple[int, Prepared]]] = [[]]
        seen: set[str] = set()
        prefix = batch_run_prefix(tenant, batch_id) if batch_id else None
        defaults = [f"{prefix}{offset + i}" if prefix else new_run_id() for i in range(len(items))]
        # The tenant's quota admits the whole request at once, in one call that Redis runs while
        # the first chunk is validated; nothing is sent before it answers (a check per chunk would
        # wait for Redis to finish the previous chunk every time). Items that then fail validation
        # were counted and are forgotten after ADMIT_GRACE_MS, as any refused submission.
        claimed = [claimed_id(raw) or d for raw, d in zip(items, defaults, strict=True)]
        admission = asyncio.ensure_future(self.admit(tenant, claimed, quota))
        await asyncio.sleep(0)  # let it go out

        def refused(exc: SubmissionError) -> list[Submitted | SubmissionError]:
            return [
                SubmissionError(exc.code, f"runs.{i}: {exc.message}", status=exc.status, field=f"runs.{i}",
                                retry_after_s=exc.retry_after_s)
                for i in range(len(items))
            ]  # fmt: skip

        async with ChunkSender(self, tenant, batch_id or "", batch_webhook or "") as sender:
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
                except (ForeignRunError, ForeignSessionError):  # rare: again alone, scoped
                    run = prep.run.model_copy(update={"run_id": prep.run_id})
                    try:
                        out[i] = await self._submit_scoped(run, tenant, batch_id or "")
                    except SubmissionError as exc:
                        out[i] = exc
                except SubmissionError as exc:
                    out[i] = exc
        if batch_id and not more:
            await self.scripts.batch_close(args=[tenant, batch_id])
        return [o for o in out if o is not None]

    def _submit_many_args(
        self, chunk: list[Prepared], tenant: str, batch_id: str, batch_webhook: str
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


SUBMIT_CHUNK = 100  # runs per SUBMIT_MANY call: small enough that Redis runs one while the next is prepared


def _check_size(size: int) -> None:
    if size > limits.MAX_RUN_INPUT_BYTES:
        raise SubmissionError(
            "too_large", f"the run input is {size} bytes; at most {limits.MAX_RUN_INPUT_BYTES}", status=413
        )
