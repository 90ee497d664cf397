"""Submitting runs: validate RunInputs and enqueue them to arq through atomic scripts (the submission
half of producer.service.Producer).

One run = one run hash + one arq job named after the runId, created together in one script on the
run's partition (producer.placement), so submitting the same runId twice yields one run. Many runs
at once: producer.batch_submit.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

import orjson
from pydantic import ValidationError

from producer import admission, batch_submit
from producer.placement import POINTER_EXTRA_S, Holder, claim, generated_id, partition_of, verdict
from producer.routing import Parts, run_script
from producer.submission import (
    Prepared,
    Scope,
    SubmissionError,
    Submitted,
    claimed_id,
    claimed_session,
    counted,
    meta_terms,
    outcome,
    reserved_id_error,
    run_id_for_key,
    validation_error,
)
from shared import keys, limits
from shared.codec import to_jsonable
from shared.models import RunInput
from shared.profiles import AgentProfile
from shared.quotas import DEFAULT_TENANT, Quota
from shared.scripts import Scripts
from shared.settings import Settings

__all__ = ["ADMIT_GRACE_MS", "Submitter"]

ADMIT_GRACE_MS = admission.ADMIT_GRACE_MS


class Submitter:
    """Submission: one run (``submit``) or many (``submit_many``), counted against the tenant's quota."""

    parts: Parts
    settings: Settings
    profiles: dict[str, AgentProfile] | None
    scripts: Scripts
    _many_loaded: set[int]  # the nodes (ids of their clients) SUBMIT_MANY was loaded on

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

    def scope(self, tenant: str) -> Scope:
        """The ids ``tenant``'s runs and sessions are kept under (producer.submission.Scope)."""
        return Scope.of(self.settings, tenant)

    def generated(self, scope: Scope, raw: RunInput | dict[str, Any]) -> str:
        """A new run id for ``raw`` (placement.generated_id), its keys living at home."""
        return generated_id(self.parts.layout, lambda r: scope.key(claimed_session(raw, r)), scope.key)

    def prepare(self, raw: RunInput | dict[str, Any], tenant: str, default_id: str | None = None) -> Prepared:
        """Validate one input and name it: its runId (else ``default_id``, else a generated one), its
        session (``ses_<runId>`` when it creates one unnamed) and the ids its keys use (Scope);
        the body serialized once (size check, stored input, input hash). Raises SubmissionError
        naming the field."""
        run = self._validated(raw)
        if (reserved := reserved_id_error(run)) is not None:
            raise reserved
        scope = self.scope(tenant)
        body = to_jsonable(run)
        rid = body.pop("runId", None) or default_id or self.generated(scope, run)
        if run.session_id is None and run.auto_create_session:
            body["sessionId"] = f"ses_{rid}"
        sid = body.get("sessionId") or ""
        key_rid, key_sid = scope.key(rid), scope.key(sid)
        if key_sid:
            body["sessionId"] = key_sid
        canonical = orjson.dumps(body, option=orjson.OPT_SORT_KEYS)
        _check_size(len(canonical))
        digest = hashlib.sha256(canonical).hexdigest()
        body["runId"] = key_rid
        return Prepared(
            run.model_copy(update={"run_id": rid, "session_id": sid or None}), key_rid, key_sid,
            orjson.dumps(body), digest, rid if rid != key_rid else "", sid if sid != key_sid else "",
        )  # fmt: skip

    def _partition(self, run_id: str, session_id: str) -> keys.Partition:
        return partition_of(self.parts.layout, run_id, session_id)

    @property
    def _pointer_ttl(self) -> int:
        return self.settings.retention_s + POINTER_EXTRA_S

    def _submit_call(
        self, prep: Prepared, part: keys.Partition, tenant: str, batch_id: str = "", item: int | None = None
    ) -> tuple[list[Any], list[Any]]:
        """SUBMIT's keys and arguments on the run's partition; ``item``: the run's item index in the
        batch ``batch_id``."""
        run, rid, sid = prep.run, prep.run_id, prep.session_id
        own = [part.run(rid), part.job_key(part.job_id(rid, 1)), part.session(sid), part.session_pending(sid),
               part.session_runs(sid)]  # fmt: skip
        args: list[Any] = [
            rid,
            prep.body,
            prep.digest,
            tenant,
            sid,
            run.webhook or "",
            "1" if run.auto_create_session else "",
            (run.multitask_strategy or "enqueue"),
            batch_id,
            run.agent,
            *counted(meta_terms(run.metadata)),
            prep.client_id,
            prep.client_session,
            "" if item is None else str(item),
        ]
        return self.scripts.frame(part, own, args)

    async def admit(self, tenant: str, placed: Mapping[int, Sequence[str]], quota: Quota | None) -> None:
        """Count the runs (their ids by partition index) against the tenant's maxActive and
        submitsPerSecond quotas, or raise 429 (producer.admission)."""
        ttl_ms = self.settings.retention_s * 1000
        await admission.admit(self.parts, self.scripts, ttl_ms, tenant, placed, quota)

    async def submit(
        self,
        raw: RunInput | dict[str, Any],
        *,
        tenant: str = DEFAULT_TENANT,
        idempotency_key: str | None = None,
        quota: Quota | None = None,
    ) -> Submitted:
        prep = self.prepare(raw, tenant, run_id_for_key(tenant, idempotency_key) if idempotency_key else None)
        rid = prep.run_id
        part = self._partition(rid, prep.session_id)
        # The pointer claim (producer.placement) goes out with the admission; a generated id needs none.
        chosen = self.parts.layout.count > 1 and (claimed_id(raw) is not None or bool(idempotency_key))
        looked = (
            asyncio.ensure_future(claim(self.parts, [(rid, part)], self._pointer_ttl)) if chosen else None
        )
        try:
            await self.admit(tenant, {part.index: [rid]}, quota)
        except BaseException:
            if looked is not None:
                looked.cancel()
            raise
        holder = (await looked)[0] if looked is not None else None
        return await self.submit_prepared(prep, tenant, looked=True, holder=holder)

    async def submit_prepared(
        self,
        prep: Prepared,
        tenant: str,
        batch_id: str = "",
        *,
        looked: bool = False,
        holder: Holder = None,
        item: int | None = None,
    ) -> Submitted:
        """Submit one prepared run (``item``: its item index in the batch ``batch_id``). With more
        than one partition, the run's pointer is claimed first (producer.placement), unless the
        caller ``looked`` already and found ``holder``."""
        part = self._partition(prep.run_id, prep.session_id)
        if not looked and self.parts.layout.count > 1:
            holder = (await claim(self.parts, [(prep.run_id, part)], self._pointer_ttl))[0]
        if holder is not None:
            reply: Sequence[Any] = verdict(holder, tenant, prep.digest)
        else:
            k, a = self._submit_call(prep, part, tenant, batch_id, item)
            reply = await run_script(self.parts, self.scripts.submit, part, k, a)
        return outcome(prep.run, reply)

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
        """Many runs at once, in order, as a batch with ``batch_id`` (producer.batch_submit)."""
        return await batch_submit.submit_many(
            self, items, tenant=tenant, batch_id=batch_id, offset=offset,
            batch_webhook=batch_webhook, quota=quota, more=more,
        )  # fmt: skip


def _check_size(size: int) -> None:
    if size > limits.MAX_RUN_INPUT_BYTES:
        raise SubmissionError(
            "too_large", f"the run input is {size} bytes; at most {limits.MAX_RUN_INPUT_BYTES}", status=413
        )
