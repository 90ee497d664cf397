"""Submitting runs, in four public steps that a single submit and a batch (producer.batch_submit)
both take: ``prepare`` (validate, name, encode once: producer.prepared), ``place`` (the partition a
run lives in: producer.placement), ``admit`` (the tenant's quota, with the pointers of chosen ids
claimed meanwhile: producer.admission) and ``send`` (one run's SUBMIT; a batch's chunks go through
``sender``, producer.chunk_sender).

One run = one run hash + one arq job named after the runId, created together in one script on the
run's partition, so submitting the same runId twice yields one run.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from agentmill_client import limits
from agentmill_client.models import RunInput
from producer import admission
from producer.agent_choice import AgentChoice
from producer.agents import AgentDirectory, Ref
from producer.audit import Pending, entry_on
from producer.chunk_sender import ChunkSender
from producer.placement import POINTER_EXTRA_S, Holder, claim, generated_id, partition_of, verdict
from producer.prepared import (
    Prepared,
    check_agent,
    check_priced,
    concurrency_limit,
    prepare,
    unknown_agent,
    validated,
)
from producer.rate_keys import with_starts
from producer.schemas_ready import schemas_ready
from producer.scope import Scope, claimed_home, claimed_id, run_id_for_key
from producer.submission import SubmissionError, Submitted, outcome
from shared import keys
from shared.calls.admissions import IdempotencyClaim
from shared.calls.submission import AdmitSubmit, SubmitVerdict
from shared.profiles import AgentProfile
from shared.quotas import DEFAULT_TENANT, Quota
from shared.replies import text
from shared.script_sending import Parts, run_script
from shared.scripts import Scripts
from shared.settings import Settings

__all__ = ["ADMIT_GRACE_MS", "Submitter"]

log = logging.getLogger("agentmill.producer")
ADMIT_GRACE_MS = admission.ADMIT_GRACE_MS
Claims = Sequence[tuple[str, keys.Partition]]  # (run id, the partition it is claimed for)


class Submitter:
    """Submission to the partitions ``parts``: one run (``submit``), or the steps a batch takes."""

    def __init__(
        self, parts: Parts, settings: Settings, scripts: Scripts, profiles: dict[str, AgentProfile] | None
    ) -> None:
        self.parts, self.settings, self.scripts, self.profiles = parts, settings, scripts, profiles
        self._many_loaded: set[tuple[int, str]] = set()  # (node, sha): SUBMIT_MANY is loaded on that node
        # the tenants' agents kept through the API (producer.agents)
        self.agents = AgentDirectory(parts, scripts, settings, lambda: self.profiles)

    @property
    def layout(self) -> keys.Layout:
        return self.parts.layout

    def scope(self, tenant: str) -> Scope:
        """The ids ``tenant``'s runs and sessions are kept under (producer.scope.Scope)."""
        return Scope.of(self.settings, tenant)

    def generated(self, scope: Scope, raw: RunInput | dict[str, Any]) -> str:
        """A new run id for ``raw`` (placement.generated_id), its keys living at home."""
        return generated_id(self.layout, lambda r: claimed_home(raw, r, scope), scope.key)

    def check_batch_size(self, n: int) -> None:
        """The batch limit (AGENTMILL_MAX_BATCH), for the API and the Python API alike: 413 past it."""
        if n > self.settings.max_batch:
            raise SubmissionError(
                "batch_too_large",
                f"runs: at most {self.settings.max_batch} items per batch",
                status=413,
                field="runs",
            )

    # ---- the steps ----

    async def choices(self, tenant: str, raws: Sequence[RunInput | dict[str, Any]]) -> dict[Ref, AgentChoice]:
        """The tenant's agents the inputs name, read before they are prepared (producer.agents)."""
        refs: list[Ref] = []
        for raw in raws:
            if isinstance(raw, RunInput):
                refs.append((raw.agent, raw.agent_version))
            elif isinstance(raw, dict):
                agent, version = (
                    raw.get("agent", "default"),
                    raw.get("agentVersion", raw.get("agent_version")),
                )
                if isinstance(agent, str) and (version is None or type(version) is int):
                    refs.append((agent, version))
        return await self.agents.choices(tenant, refs) if refs else {}

    def prepare(
        self,
        raw: RunInput | dict[str, Any],
        tenant: str,
        default_id: str = "",
        quota: Quota | None = None,
        trace: str = "",
        choices: Mapping[Ref, AgentChoice] | None = None,
    ) -> Prepared:
        """Validate one input and name it (its runId, else ``default_id``, else a generated one);
        its body serialized once (producer.prepared.prepare), its priority capped by ``quota`` and
        by its agent profile; ``trace``: the submitter's trace context (shared.trace_context).
        A tenant's agent among ``choices`` (read by ``choices``) pins it to a version.
        Raises SubmissionError naming the field."""
        scope = self.scope(tenant)
        run = validated(raw, None)
        cap = quota.max_priority if quota is not None else limits.MAX_PRIORITY
        choice = choices.get((run.agent, run.agent_version)) if choices else None
        if choice is not None and choice.refusal is not None:
            raise SubmissionError(choice.refusal.code, choice.refusal.message, field=choice.refusal.field)
        if choice is not None:
            rid = run.run_id or default_id or self.generated(scope, run)
            version = choice.version_for(rid)
            profile = choice.profiles[version]
            run = run.model_copy(update={"agent": choice.name, "agent_version": version})
            check_agent(run, {choice.name: profile})
            return prepare(run, scope, lambda r: rid, min(cap, profile.max_priority), trace)
        if run.agent_version is not None:
            if self.profiles is not None and run.agent in self.profiles:
                raise SubmissionError("unknown_version", f"agentVersion: the operator's profile {run.agent!r} "
                                      "has no versions", field="agentVersion")  # fmt: skip
            raise unknown_agent(run.agent, self.profiles)
        check_agent(run, self.profiles)
        if self.profiles is not None:
            profile = self.profiles[run.agent]
            cap = min(cap, profile.max_priority)
            if (
                run.store_content is None and not profile.store_content
            ):  # the profile's default, kept with the run
                run = run.model_copy(update={"store_content": False})
            check_priced(run, profile, quota)
        conc = concurrency_limit(run, quota)
        return prepare(run, scope, lambda r: default_id or self.generated(scope, r), cap, trace, conc)

    def place(self, run_id: str, home: str) -> keys.Partition:
        """The partition of the run whose keys use ``run_id`` and that lives at ``home``'s home
        ('' = its own: Prepared.home, producer.scope.claimed_home; producer.placement)."""
        return partition_of(self.layout, run_id, home)

    async def admit(
        self, tenant: str, placed: Mapping[int, Sequence[str]], quota: Quota | None, claims: Claims = ()
    ) -> list[Holder]:
        """Count the runs (their ids by partition index) against the tenant's maxActive and
        submitsPerSecond quotas, or raise 429 (producer.admission); meanwhile claim the pointers of
        ``claims`` (ids chosen, not generated, with more than one partition: producer.placement) and
        return what holds each already (None: free)."""
        ttl_ms = self.settings.retention_s * 1000
        looked = asyncio.ensure_future(self.claim(claims)) if claims else None
        try:
            await admission.admit(self.parts, self.scripts, ttl_ms, tenant, placed, quota)
        except BaseException:
            if looked is not None:
                looked.cancel()
            raise
        return await looked if looked is not None else []

    async def claim(self, claims: Claims) -> list[Holder]:
        """The pointers of ``claims`` claimed (producer.placement.claim): what holds each id already."""
        return await claim(self.parts, claims, self.settings.retention_s + POINTER_EXTRA_S)

    async def send(
        self,
        prep: Prepared,
        tenant: str,
        batch_id: str = "",
        *,
        looked: bool = False,
        holder: Holder = None,
        item: int | None = None,
        audit: Pending | None = None,
    ) -> Submitted:
        """Submit one prepared run (SUBMIT; ``item``: its item index in the batch ``batch_id``). With
        more than one partition, the run's pointer is claimed first, unless the caller ``looked``
        already and found ``holder``. ``audit``: its audit entry, sent in the same round trip."""
        part = self.place(prep.run_id, prep.home)
        if not looked and self.layout.count > 1:
            holder = (await self.claim([(prep.run_id, part)]))[0]
        if holder is not None:
            reply: Sequence[Any] = verdict(holder, tenant, prep.digest)
        elif audit is not None:
            prep = await self.started(prep, tenant)
            k, a = self._submit_call(prep, part, tenant, batch_id, item)
            out = self.parts.sending()
            out.add_script(part, self.scripts.submit, k, a)
            for part_cmd in audit(prep.run.run_id or prep.run_id):
                out.add(*part_cmd)
            reply, *recorded = await out.replies()
            if isinstance(reply, Exception):
                raise reply
            if any(isinstance(r, Exception) for r in recorded):
                log.error("audit: submit of %s not recorded: %r", prep.run.run_id, recorded)
        else:
            prep = await self.started(prep, tenant)
            k, a = self._submit_call(prep, part, tenant, batch_id, item)
            reply = await run_script(self.parts, self.scripts.submit, part, k, a)
        return outcome(prep.run, reply)

    async def key_run_id(self, tenant: str, key: str) -> str:
        """The run an Idempotency-Key (``key``: the client's, with what else names the request) names:
        always the same id without AGENTMILL_IDEMPOTENCY_TTL_S (the key replays while that run is
        kept); with it, the id its record names, else a new one, recorded for the window (one round
        trip to the record's partition, idempotency_claim.lua)."""
        named = run_id_for_key(tenant, key)
        ttl = self.settings.idempotency_ttl_s
        if ttl is None:
            return named
        home = self.layout.home(named)
        offered = run_id_for_key(tenant, f"{key}\0{uuid.uuid4().hex}")
        call = IdempotencyClaim(named, offered, ttl)
        k, a = self.scripts.framing.frame(home, call.keys(home), call.argv())
        return text(await run_script(self.parts, self.scripts.idempotency_claim, home, k, a))

    async def started(self, prep: Prepared, tenant: str) -> Prepared:
        """The run with the start its rate key gives it (producer.rate_keys), or 429 ``rate_full``."""
        if prep.run.rate is None:
            return prep
        got = (await self.starts(tenant, [prep]))[0]
        if isinstance(got, SubmissionError):
            raise got
        return got

    async def starts(self, tenant: str, preps: Sequence[Prepared]) -> list[Prepared | SubmissionError]:
        """The runs with the starts their rate keys give them (producer.rate_keys.with_starts)."""
        return await with_starts(self.parts, self.scripts, tenant, self.settings.key_max_waiting, preps)

    def sender(self, tenant: str, batch_id: str) -> ChunkSender:
        """Sends a batch's chunks (SUBMIT_MANY), one connection per node (producer.chunk_sender)."""
        return ChunkSender(self.parts, self.scripts, self._many_loaded, tenant, batch_id)

    # ---- one run ----

    async def submit(
        self,
        raw: RunInput | dict[str, Any],
        *,
        tenant: str = DEFAULT_TENANT,
        idempotency_key: str | None = None,
        quota: Quota | None = None,
        trace: str = "",
        audit: Pending | None = None,
    ) -> Submitted:
        """One run: prepared, placed, admitted (its pointer claimed meanwhile when its id was chosen:
        a generated id needs none) and sent; ``trace``: the submitter's trace context; ``audit``: its
        audit entry, sent in the submission's round trip. With quotas, the admission ends in the
        script that creates the run (admit_submit.lua, producer.admission.settle_one): one round
        trip with one partition; with more, one before it (the tenant's runs counted on each
        partition, and its bucket's token when the tenant's home is not the run's partition)."""
        await schemas_ready([raw])  # off the loop, before prepare checks them
        prep = self.prepare(
            raw,
            tenant,
            await self.key_run_id(tenant, idempotency_key) if idempotency_key else "",
            quota,
            trace,
            await self.choices(tenant, [raw]),
        )
        part = self.place(prep.run_id, prep.home)
        chosen = self.layout.count > 1 and (claimed_id(raw) is not None or bool(idempotency_key))
        looked = asyncio.ensure_future(self.claim([(prep.run_id, part)])) if chosen else None
        try:
            admitted = await admission.admit_one(self.parts, self.scripts, tenant, part, quota)
        except BaseException:
            if looked is not None:
                looked.cancel()
            raise
        holder = (await looked)[0] if looked is not None else None
        if admitted is None or quota is None or holder is not None:
            return await self.send(prep, tenant, looked=True, holder=holder, audit=audit)
        prep = await self.started(prep, tenant)

        async def send(a: admission.OneAdmission) -> Sequence[Any]:
            return await self._send_admitted(prep, part, tenant, a, audit)

        ttl_ms = self.settings.retention_s * 1000
        reply = await admission.settle_one(
            self.parts, self.scripts, ttl_ms, tenant, part, quota, admitted, send
        )
        return outcome(prep.run, reply)

    async def _send_admitted(
        self,
        prep: Prepared,
        part: keys.Partition,
        tenant: str,
        a: admission.OneAdmission,
        audit: Pending | None,
    ) -> Sequence[Any]:
        """The run's admit_submit call (AdmitSubmit) on its partition: its audit entry written by the
        script once the run is admitted when the tenant's log is there, else sent after it."""
        cmds = audit(prep.run.run_id or prep.run_id) if audit is not None else []
        entry, rest = entry_on(cmds, part)
        call = AdmitSubmit(a.room, self.settings.retention_s * 1000, ADMIT_GRACE_MS, a.per_second, a.burst,
                           entry, prep.submission(tenant))  # fmt: skip
        k, args = self.scripts.framing.frame(part, call.keys(part), call.argv())
        after = [] if entry or not cmds else rest  # an entry for another partition: once admitted
        out = self.parts.sending()
        out.add_script(part, self.scripts.admit_submit, k, args)
        for part_cmd in [] if after else rest:
            out.add(*part_cmd)
        reply, *recorded = await out.replies()
        if isinstance(reply, Exception):
            raise reply
        if after and text(reply[0]) not in (
            SubmitVerdict.RATE_LIMITED,
            SubmitVerdict.QUOTA_EXCEEDED,
        ):
            out = self.parts.sending()
            for part_cmd in after:
                out.add(*part_cmd)
            recorded = await out.replies()
        if any(isinstance(r, Exception) for r in recorded):
            log.error("audit: submit of %s not recorded: %r", prep.run.run_id, recorded)
        return list(reply)

    def _submit_call(
        self, prep: Prepared, part: keys.Partition, tenant: str, batch_id: str = "", item: int | None = None
    ) -> tuple[list[Any], list[Any]]:
        """SUBMIT's keys and arguments on the run's partition, framed; ``item``: the run's item index
        in the batch ``batch_id``."""
        call = prep.submission(tenant, batch_id, item)
        return self.scripts.framing.frame(part, call.keys(part), call.argv())
