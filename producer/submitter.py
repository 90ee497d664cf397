"""Submitting runs: validate RunInputs and enqueue them to arq through atomic scripts (the submission
half of producer.service.Producer).

One run = one run hash + one arq job named after the runId, created together in one script on the
run's partition (producer.placement), so submitting the same runId twice yields one run. A batch is
one pipelined round trip per node.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

import orjson
from pydantic import ValidationError

from producer import admission
from producer.batching import batch_gate, close_batch
from producer.chunks import ChunkSender
from producer.placement import POINTER_EXTRA_S, Holder, claim, generated_id, partition_of, verdict
from producer.routing import Parts, run_script
from producer.submission import (
    ForeignRunError,
    ForeignSessionError,
    Prepared,
    SubmissionError,
    Submitted,
    batch_run_prefix,
    claimed_id,
    claimed_session,
    counted,
    input_hash,
    meta_terms,
    outcome,
    run_id_for_key,
    scoped_id,
    validation_error,
)
from shared import keys, limits
from shared.codec import to_jsonable
from shared.ids import new_run_id
from shared.models import RunInput
from shared.profiles import AgentProfile
from shared.quotas import DEFAULT_TENANT, Quota
from shared.scripts import Scripts
from shared.settings import Settings

__all__ = ["ADMIT_GRACE_MS", "SUBMIT_CHUNK", "Submitter"]

ADMIT_GRACE_MS = admission.ADMIT_GRACE_MS
Chunk = list[tuple[int, Prepared]]  # runs of one partition, with their index in the request


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

    def prepare(
        self, raw: RunInput | dict[str, Any], *, tenant: str, idempotency_key: str | None = None
    ) -> RunInput:
        """Validate one input and fix its runId; raises SubmissionError naming the field."""
        run = self._validated(raw)
        _check_size(len(orjson.dumps(to_jsonable(run))))
        if run.run_id is None:
            rid = run_id_for_key(tenant, idempotency_key) if idempotency_key else self._generated(run)
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
        rid = (
            body.pop("runId", None)
            or default_id
            or generated_id(self.parts.layout, lambda r: claimed_session(run, r))
        )
        if run.session_id is None and run.auto_create_session:
            body["sessionId"] = f"ses_{rid}"
        canonical = orjson.dumps(body, option=orjson.OPT_SORT_KEYS)
        _check_size(len(canonical))
        digest = hashlib.sha256(canonical).hexdigest()
        body["runId"] = rid
        return Prepared(run, rid, body.get("sessionId") or "", orjson.dumps(body), digest)

    def _generated(self, raw: RunInput | dict[str, Any]) -> str:
        """A new id for the run of ``raw``, living at home (producer.placement.generated_id)."""
        if self.parts.layout.count == 1:  # every id lives at home
            return new_run_id()
        return generated_id(self.parts.layout, lambda r: claimed_session(raw, r))

    def _partition(self, run_id: str, session_id: str) -> keys.Partition:
        return partition_of(self.parts.layout, run_id, session_id)

    @property
    def _pointer_ttl(self) -> int:
        return self.settings.retention_s + POINTER_EXTRA_S

    def _submit_call(
        self,
        run: RunInput,
        part: keys.Partition,
        tenant: str,
        digest: str,
        *,
        client_id: str = "",
        batch_id: str = "",
    ) -> tuple[list[Any], list[Any]]:
        """SUBMIT's keys and arguments on the run's partition; ``client_id``: the id the client
        chose, when ``run`` carries its tenant-scoped id (views show it)."""
        rid = run.run_id
        assert rid is not None
        sid = run.session_id or ""
        own = [part.run(rid), part.job_key(part.job_id(rid, 1)), part.session(sid), part.session_pending(sid),
               part.session_runs(sid)]  # fmt: skip
        args: list[Any] = [
            rid,
            orjson.dumps(to_jsonable(run)),
            digest,
            tenant,
            sid,
            run.webhook or "",
            "1" if run.auto_create_session else "",
            (run.multitask_strategy or "enqueue"),
            batch_id,
            run.agent,
            *counted(meta_terms(run.metadata)),
            client_id if client_id != rid else "",
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
        run = self.prepare(raw, tenant=tenant, idempotency_key=idempotency_key)
        rid = run.run_id or ""
        part = self._partition(rid, run.session_id or "")
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
        return await self._submit_scoped(run, tenant, looked=True, holder=holder)

    async def _submit_scoped(
        self, run: RunInput, tenant: str, batch_id: str = "", *, looked: bool = False, holder: Holder = None
    ) -> Submitted:
        """Submit; a runId or sessionId that another tenant holds is replaced by its scoped id. With
        more than one partition, the run's pointer is claimed first (producer.placement), unless the
        caller ``looked`` already and found ``holder``."""
        client_id = run.run_id or ""
        scoped: set[str] = set()
        while True:
            rid, digest = run.run_id or "", input_hash(run)
            part = self._partition(rid, run.session_id or "")
            if not looked and self.parts.layout.count > 1:
                holder = (await claim(self.parts, [(rid, part)], self._pointer_ttl))[0]
            looked = False
            if holder is not None:
                reply: Sequence[Any] = verdict(holder, tenant, digest)
            else:
                k, a = self._submit_call(run, part, tenant, digest, client_id=client_id, batch_id=batch_id)
                reply = await run_script(self.parts, self.scripts.submit, part, k, a)
            holder = None
            try:
                sub = outcome(run, reply)
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
        SUBMIT_CHUNK runs of one partition, each chunk sent as soon as it is ready on one connection
        per node, so Redis runs a chunk while the next one is validated, and all replies are read at
        the end. With ``batch_id`` the runs form a batch (producer.listing); items without a runId
        then get one derived from (batch, offset + index), so sending the same batch again creates
        nothing new. ``more``: more parts of the batch follow, so it cannot finish yet; a request
        without it closes the batch, which then finishes (and fires its webhook, once) when its runs
        have all ended."""
        self.check_batch_size(len(items))
        layout = self.parts.layout
        out: list[Submitted | SubmissionError | None] = [None] * len(items)
        seen: set[str] = set()
        prefix = batch_run_prefix(tenant, batch_id) if batch_id else None
        defaults = [
            f"{prefix}{offset + i}" if prefix else self._generated(raw) for i, raw in enumerate(items)
        ]
        # The tenant's quota admits the whole request at once, in calls that Redis runs while the
        # first chunk is validated; nothing is sent before they answer (a check per chunk would
        # wait for Redis to finish the previous chunk every time). Items that then fail validation
        # were counted and are forgotten after ADMIT_GRACE_MS, as any refused submission. On more
        # than one partition, the pointers of the ids not generated here are claimed meanwhile
        # (producer.placement), and the batch's shares looked at (producer.batching.batch_gate).
        placed: dict[int, list[str]] = {}
        chosen: dict[int, tuple[str, keys.Partition]] = {}  # item -> (its id, where its id is claimed)
        if layout.count == 1:  # one partition: every run lives there, no pointer to claim
            placed[0] = [claimed_id(raw) or d for raw, d in zip(items, defaults, strict=True)]
        for i, (raw, d) in enumerate(zip(items, defaults, strict=True) if layout.count > 1 else ()):
            rid = claimed_id(raw) or d
            part = self._partition(rid, claimed_session(raw, rid))
            placed.setdefault(part.index, []).append(rid)
            if prefix is not None or rid != d:
                chosen[i] = (rid, part)
        admitted = asyncio.ensure_future(self.admit(tenant, placed, quota))
        gated = (
            asyncio.ensure_future(batch_gate(self.parts, tenant, batch_id, batch_webhook or ""))
            if batch_id and layout.count > 1
            else None
        )
        looked = (
            asyncio.ensure_future(claim(self.parts, list(chosen.values()), self._pointer_ttl))
            if chosen
            else None
        )
        await asyncio.sleep(0)  # let them go out
        holders: dict[int, Holder] = {}

        async def ready() -> tuple[frozenset[int], str]:
            """(the partitions that refuse the batch's new runs, the batch webhook its new shares
            get) once admitted."""
            await admitted
            refusing, webhook = await gated if gated is not None else (frozenset(), batch_webhook or "")
            if looked is not None and not holders:
                holders.update(zip(chosen, await looked, strict=True))
            return refusing, webhook

        def refused(exc: SubmissionError) -> list[Submitted | SubmissionError]:
            return [
                SubmissionError(exc.code, f"runs.{i}: {exc.message}", status=exc.status, field=f"runs.{i}",
                                retry_after_s=exc.retry_after_s)
                for i in range(len(items))
            ]  # fmt: skip

        unsent: dict[int, Chunk] = {}  # per partition: its runs not sent yet
        sent: list[Chunk] = []
        answered: list[tuple[Chunk, Any]] = []  # answered here (id held, batch finished); None: alone

        def misplaced(i: int, prep: Prepared, part: keys.Partition) -> bool:
            """Not where its id was claimed (or drawn to live), as its input turned out: it goes alone."""
            expected = chosen.get(i) or (prep.run_id, layout.home(prep.run_id))
            return layout.count > 1 and expected != (prep.run_id, part)

        async def flush(part: keys.Partition, chunk: Chunk) -> None:
            refusing, webhook = await ready()
            go: Chunk = []
            for i, prep in chunk:
                if part.index in refusing:  # a finished batch with no share here (the script would add one)
                    answered.append(([(i, prep)], ["batch_finished", ""]))
                elif misplaced(i, prep, part):
                    answered.append(([(i, prep)], None))
                elif (holder := holders.get(i)) is not None:
                    answered.append(([(i, prep)], list(verdict(holder, tenant, prep.digest))))
                else:
                    go.append((i, prep))
            if go:
                await sender.send(part, [p for _, p in go], webhook)
                sent.append(go)

        async with ChunkSender(self, tenant, batch_id or "") as sender:
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
                    part = self._partition(prep.run_id, prep.session_id)
                    chunk = unsent.setdefault(part.index, [])
                    chunk.append((i, prep))
                    if len(chunk) == SUBMIT_CHUNK:
                        await flush(part, chunk)  # raises the quota's refusal before anything is sent
                        unsent[part.index] = []
                await ready()
            except SubmissionError as exc:
                return refused(exc)
            finally:
                for f in (admitted, gated, looked):  # an unexpected error while validating: do not leave them
                    if f is not None and not f.done():
                        f.cancel()
                    elif f is not None and not f.cancelled():
                        f.exception()  # retrieved (raised above, or not needed any more)
            for index, chunk in unsent.items():
                if chunk:
                    await flush(layout.parts[index], chunk)
            answers = await sender.replies()
        for chunk, answer in [*zip(sent, answers, strict=True), *answered]:
            for k, (i, prep) in enumerate(chunk):
                if isinstance(answer, Exception):
                    out[i] = SubmissionError("enqueue_failed", f"runs.{i}: {answer}", status=503)
                    continue
                try:
                    if answer is None:
                        out[i] = await self._alone(prep, tenant, batch_id or "")
                        continue
                    out[i] = outcome(prep.run, answer[2 * k : 2 * k + 2], prep.run_id)
                except (ForeignRunError, ForeignSessionError):  # rare: again alone, scoped
                    out[i] = await self._alone(prep, tenant, batch_id or "")
                except SubmissionError as exc:
                    out[i] = exc
        if batch_id and not more:
            await close_batch(self.parts, self.scripts, tenant, batch_id)
        return [o for o in out if o is not None]

    async def _alone(self, prep: Prepared, tenant: str, batch_id: str) -> Submitted | SubmissionError:
        """One run of a batch submitted on its own (a held id: scoped; placed elsewhere than claimed)."""
        update = {"run_id": prep.run_id, "session_id": prep.session_id or None}
        try:
            return await self._submit_scoped(prep.run.model_copy(update=update), tenant, batch_id)
        except SubmissionError as exc:
            return exc


SUBMIT_CHUNK = 100  # runs per SUBMIT_MANY call: small enough that Redis runs one while the next is prepared


def _check_size(size: int) -> None:
    if size > limits.MAX_RUN_INPUT_BYTES:
        raise SubmissionError(
            "too_large", f"the run input is {size} bytes; at most {limits.MAX_RUN_INPUT_BYTES}", status=413
        )
