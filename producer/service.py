"""The producer service in Python: submit runs (its Submitter, producer.submitter; many at once:
producer.batch_submit), read them and their events, wait
for them, abort them, settle their approvals, post client tool results, read sessions.

Every read by run id first finds the run's partition (Partitions.locate: no round trip with one
partition); a session lives at its id's home partition."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from redis.asyncio import Redis

from agentmill_client.models import ClientToolResult, RunEvent, RunInput
from producer import batch_submit, decisions
from producer.archived import ArchiveReads
from producer.audit import Pending
from producer.client_ids import client_id_of
from producer.hash_record import record_of
from producer.placement import locate_many
from producer.run_record import RUN_FIELDS, RunRecord, fields_of
from producer.scope import Scope
from producer.sessions import SessionReads
from producer.submission import SubmissionError, Submitted
from producer.submitter import Submitter
from producer.tombstones import tombstoned
from shared import keys, payload_crypto
from shared.actors import actor_json
from shared.archive.store import ArchiveStore
from shared.calls.runs import Abort
from shared.children import child_runs
from shared.events import decode_entry, stream_id
from shared.fields import RunField
from shared.profiles import AgentProfile
from shared.quotas import DEFAULT_TENANT, Quota
from shared.replies import text
from shared.script_sending import Parts, as_partitions, run_script
from shared.scripts import Scripts
from shared.settings import Settings, get_settings

__all__ = ["DEFAULT_TENANT", "Producer", "RunRecord", "SubmissionError", "Submitted"]

F = RunField


class Producer:
    """The producer service in Python: submit runs (through its Submitter), read them, wait for them,
    control them.

    ``redis``: a plain client (the settings' partitions all on it) or a started Partitions; the
    caller closes it. ``stream_redis`` likewise, for blocking stream reads (default: ``redis``)."""

    def __init__(
        self,
        redis: Redis | Parts,
        *,
        settings: Settings | None = None,
        profiles: dict[str, AgentProfile] | None = None,
        stream_redis: Redis | Parts | None = None,
    ) -> None:
        self.settings = settings or get_settings()
        self.parts = as_partitions(redis, self.settings)
        self.stream_parts = self.parts if stream_redis is None else as_partitions(stream_redis, self.settings)
        self.redis: Redis = self.parts.client(self.parts.parts[0])  # a client, for what needs one at all
        self.scripts = Scripts.for_settings(self.redis, self.settings)
        self.submitter = Submitter(self.parts, self.settings, self.scripts, profiles)
        url = self.settings.archive_url  # finished runs that left Redis are read there (producer.archived)
        self.archive = ArchiveReads(ArchiveStore(url)) if url else None

    @property
    def profiles(self) -> dict[str, AgentProfile] | None:
        """The agents runs may name (None: any), as the Submitter checks them."""
        return self.submitter.profiles

    @profiles.setter
    def profiles(self, profiles: dict[str, AgentProfile] | None) -> None:
        self.submitter.profiles = profiles

    def scope(self, tenant: str) -> Scope:
        """The ids ``tenant``'s runs and sessions are kept under (producer.scope.Scope)."""
        return self.submitter.scope(tenant)

    # ---- submitting ----

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
        """One run (Submitter.submit); a refusal raises its SubmissionError. ``trace``: the
        submitter's W3C trace context (shared.trace_context.stored), which the worker continues;
        ``audit``: its audit entry (producer.audit), sent in the submission's round trip."""
        return await self.submitter.submit(
            raw, tenant=tenant, idempotency_key=idempotency_key, quota=quota, trace=trace, audit=audit
        )

    def check_batch_size(self, n: int) -> None:
        """The batch limit (AGENTMILL_MAX_BATCH): 413 past it (Submitter.check_batch_size)."""
        self.submitter.check_batch_size(n)

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
        trace: str = "",
    ) -> list[Submitted | SubmissionError]:
        """Many runs at once, in order, as a batch with ``batch_id`` (producer.batch_submit); every
        run continues the submitter's trace context ``trace``."""
        return await batch_submit.submit_many(
            self.submitter, items, tenant=tenant, batch_id=batch_id, offset=offset,
            batch_webhook=batch_webhook, quota=quota, more=more, trace=trace,
        )  # fmt: skip

    async def locate(self, run_id: str) -> keys.Partition | None:
        """The run's partition, or None when there is no such run (no round trip with one partition)."""
        return await self.parts.locate(run_id)

    # ---- reading ----

    async def get(self, run_id: str, *, tenant: str | None = None) -> RunRecord | None:
        """The run ``tenant`` knows by ``run_id`` (kept under its tenant's key of it, or a form of
        before, submission.Scope.lookups); None when the tenant has none. No tenant: the run kept
        under ``run_id`` itself."""
        ids = [run_id] if tenant is None else self.scope(tenant).lookups(run_id)
        rec = await self._get(ids, tenant)
        if rec is None and self.archive is not None:  # (not a deleted run's rows left to the deleters)
            rec = await self.archive.record(ids, tenant)
            rec = None if rec is None or await tombstoned(self.parts, rec.key) else rec
        return None if rec is None else await self._seen(rec, run_id, tenant)

    async def _seen(self, rec: RunRecord, run_id: str, tenant: str | None) -> RunRecord:
        """The record as ``tenant`` knows it, by ``run_id`` (a child names its parent by the id its
        tenant knows it by)."""
        if tenant is not None and rec.parent_run_id:
            parent = await client_id_of(self.parts, self.archive, rec.parent_run_id, tenant)
            rec = replace(rec, parent_run_id=parent or "")
        return rec.as_seen_by(run_id)

    async def resolve(self, run_id: str, tenant: str) -> str:
        """The id the keys of ``tenant``'s run ``run_id`` use (its key when it has none)."""
        ids = self.scope(tenant).lookups(run_id)
        where = [(i, p) for i, p in enumerate(await locate_many(self.parts, ids)) if p is not None]

        def hget(key: str) -> Any:
            return lambda pipe: pipe.hget(key, F.TENANT)

        replies = await self.parts.pipelined([(p, hget(p.run(ids[i]))) for i, p in where])
        owned = {
            i for (i, _), r in zip(where, replies, strict=True) if r[0] is not None and text(r[0]) == tenant
        }
        return next((ids[i] for i in range(len(ids)) if i in owned), ids[0])

    async def _get(self, ids: Sequence[str], tenant: str | None) -> RunRecord | None:
        """The first of the runs ``ids`` that exists (and is ``tenant``'s): all read in one round trip
        per node (and their partitions located in one before, with more than one partition)."""
        where = [
            (r, p) for r, p in zip(ids, await locate_many(self.parts, ids), strict=True) if p is not None
        ]

        def read(key: str) -> Any:
            return lambda pipe: pipe.hmget(key, RUN_FIELDS)

        replies = await self.parts.pipelined([(p, read(p.run(r))) for r, p in where]) if where else []
        for (rid, p), (vals,) in zip(where, replies, strict=True):
            h = fields_of(vals)
            if vals[0] is not None and (tenant is None or h[F.TENANT] == tenant):
                return await record_of(self.parts, rid, p, h)
        return None

    async def submitted_input(self, rec: RunRecord) -> dict[str, Any] | None:
        """The RunInput the run was submitted with (as sent), while its hash holds it: None once
        archiving dropped it, or for a run read from the archive."""
        if rec.archived:
            return None
        part = self.parts.layout.of_key(rec.stream_key)

        async def read(c: Redis) -> Any:
            return await c.hget(part.run(rec.key), F.INPUT)  # type: ignore[misc]

        raw = await self.parts.call(part, read)
        if not raw:
            return None
        given = payload_crypto.loads(raw)
        return given if isinstance(given, dict) else None

    async def children(self, rec: RunRecord) -> list[dict[str, str]]:
        """The child runs (sub-agents) a run started, oldest first: runId, status, parentToolCallId
        (no round trip for a run that never started one)."""
        return await child_runs(self.parts, rec.tenant, rec.key) if rec.had_children else []

    async def read_events(
        self,
        run_id: str,
        *,
        after: int = 0,
        limit: int = 1000,
        block_ms: int | None = None,
        label: str | None = None,
        part: keys.Partition | None = None,
        archived: bool = False,
    ) -> list[RunEvent]:
        """Events with seq > after, oldest first; with block_ms, waits for the first one to appear.
        ``label``: the run id the events carry (the tenant's id of a scoped run). ``part``: the
        run's partition when the caller knows it (else located); no run, no events. ``archived``:
        the run's events are in the archive (RunRecord.archived)."""
        if archived and self.archive is not None:
            return await self.archive.events(run_id, after=after, limit=limit, label=label or run_id)
        part = part or await self.locate(run_id)
        if part is None:
            return []
        stream = part.events(run_id)
        entries: list[Any]
        if block_ms is None:

            async def page(c: Redis) -> list[Any]:
                return list(await c.xrange(stream, min=f"({stream_id(after)}", count=limit))

            entries = await self.parts.call(part, page)
        else:

            async def wait(c: Redis) -> list[Any]:
                reply = await c.xread({stream: stream_id(after)}, count=limit, block=block_ms)
                return list(reply[0][1]) if reply else []

            entries = await self.stream_parts.call(part, wait)
        return [decode_entry(label or run_id, fields) for _, fields in entries]

    async def wait(
        self, run_id: str, *, timeout_s: float, tenant: str | None = None, read: RunRecord | None = None
    ) -> RunRecord | None:
        """Until the run is terminal or the timeout passes; returns the latest record. ``read``: the
        record the caller has just read (``get``), not read again."""
        deadline = time.monotonic() + timeout_s
        rec = read or await self.get(run_id, tenant=tenant)
        while rec is not None and not rec.status.terminal and (left := deadline - time.monotonic()) > 0:
            part = self.parts.layout.of_key(rec.stream_key)
            h = await self._told(part, rec, max(1, int(min(left, 1.0) * 1000)))
            if h is None:  # its hash is gone (deleted, archived): read as any reader would
                return await self.get(run_id, tenant=tenant)
            rec = await self._seen(await record_of(self.parts, rec.key, part, h), run_id, tenant)
        return rec

    async def _told(
        self, part: keys.Partition, rec: RunRecord, block_ms: int
    ) -> dict[RunField, str | None] | None:
        """Until the run's stream has an event past ``rec``'s last or ``block_ms`` pass, then its
        hash's fields (RUN_FIELDS; None: no hash), read right behind the event in the same round
        trip: a waiter hears of the end and reads the result at once."""
        stream, run_key = part.events(rec.key), part.run(rec.key)

        async def told(c: Redis) -> list[Any]:
            async with c.pipeline(transaction=False) as pipe:
                pipe.xread({stream: stream_id(rec.last_seq)}, count=1, block=block_ms)
                pipe.hmget(run_key, RUN_FIELDS)
                return list(await pipe.execute())

        _, vals = await self.stream_parts.call(part, told)
        return fields_of(vals) if vals[0] is not None else None

    # ---- control ----

    async def abort(
        self,
        run_id: str,
        *,
        reason: str = "aborted by request",
        tenant: str | None = None,
        actor: dict[str, str] | None = None,
    ) -> str:
        """unknown | finished | aborted (was queued or awaiting approval) | requested (its worker stops it).
        ``actor`` (shared.actors): who aborts, named in the run's status event."""
        part = await self.locate(run_id)
        if part is None:
            return "unknown"
        call = Abort(run_id, reason, tenant or "", actor_json(actor))
        k, a = self.scripts.framing.frame(part, call.keys(part), call.argv())
        return Abort.verdict(await run_script(self.parts, self.scripts.abort, part, k, a)).value

    async def settle_approval(
        self,
        run_id: str,
        tool_call_id: str,
        *,
        approved: bool,
        reason: str | None = None,
        tenant: str | None = None,
        actor: dict[str, str] | None = None,
    ) -> str:
        """Record one approval decision (producer.decisions); the last one re-enqueues the run."""
        part = await self.locate(run_id)
        if part is None:
            return "unknown_run"
        return await decisions.settle_approval(self.parts, self.scripts, part, run_id, tool_call_id,
                                               approved=approved, reason=reason, tenant=tenant, actor=actor)  # fmt: skip

    async def post_tool_results(
        self,
        run_id: str,
        results: Sequence[ClientToolResult],
        *,
        tenant: str | None = None,
        actor: dict[str, str] | None = None,
    ) -> tuple[str, str, list[str]]:
        """Record results of client tool calls, all or none (producer.decisions.post_tool_results)."""
        part = await self.locate(run_id)
        if part is None:
            return "unknown_run", "", []
        return await decisions.post_tool_results(
            self.parts, self.scripts, part, run_id, results, tenant=tenant, actor=actor
        )

    async def get_session(self, session_id: str, *, tenant: str | None = None) -> dict[str, Any] | None:
        """The session's newest runs, its active run and its history of run loops, as ``tenant``
        knows it by ``session_id``; from the archive for what Redis no longer has (producer.sessions)."""
        return await SessionReads(self.parts, self.scope, self.archive).get(session_id, tenant)

    async def queue_depth(self) -> int:
        """Jobs queued on every partition (in its queue or held back by a tenant's running cap: its
        depth counters, shared/lua/prelude.lua): one round trip per node."""

        def op(pipe: Any, p: keys.Partition) -> None:
            pipe.hvals(p.depth)

        return sum(max(0, int(v)) for r in await self.parts.each(op) for v in r[0])
