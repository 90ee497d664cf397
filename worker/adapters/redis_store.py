"""The ports of worker/ports.py on Redis: a run's store (acquire, fenced commits, hand-back), a session's
history and recall; and the worker beat.

Every write goes through a script that checks the run's epoch and that the writing worker's lease is
unexpired, so a stale worker (paused past its lease, or racing a re-dispatched job) is refused and writes
nothing; the worker also checks its own lease deadline (worker.adapters.lease) before it sends one.
"""

from __future__ import annotations

import dataclasses
import secrets
from typing import Any, cast

from agentmill_client import limits
from agentmill_client.models import Message, ToolCall, ToolResult
from shared import children as kids
from shared import payload_crypto
from shared.calls.runs import Release
from shared.calls.steps import Acquire, AcquireVerdict, AppendVerdict, Commit, Publish
from shared.children import ChildSpec, Spawned
from shared.functions import Script
from shared.keys import Partition
from shared.off_loop import large, off_loop
from shared.partitions import Partitions
from shared.profiles import ContextConfig
from shared.quotas import DEFAULT_TENANT, Quotas
from shared.script_sending import run_staged
from shared.scripts import Scripts, text
from shared.settings import Settings
from shared.tool_records import ToolRecord
from worker.adapters import budgets
from worker.adapters.batcher import ScriptBatcher
from worker.adapters.lease import WorkerLease
from worker.adapters.left_out import left_out, read_left_out
from worker.core import context, sessions
from worker.core.acquisition import Acquired, NotAcquired
from worker.core.commit_step import CommitStep, Entry
from worker.core.store_errors import FencedError, SeqConflictError
from worker.ports import Clock
from worker.telemetry import tracing

__all__ = ["RedisRunStore", "RedisSessionStore"]


class RedisRunStore:
    """RunStore: one worker's handle on one run at one epoch. Counts its round trips (for the bench)."""

    def __init__(
        self,
        parts: Partitions[Any],
        scripts: Scripts,
        settings: Settings,
        part: Partition,
        run_id: str,
        lease: WorkerLease | None = None,
        batcher: ScriptBatcher | None = None,
        claimed: tuple[str, list[Any]] | None = None,
    ) -> None:
        self.parts = parts
        self.part = part
        self.slot = part.slot  # a budget settlement in this slot goes with a commit (commit.lua)
        self.lease = lease
        self.batcher = batcher
        self.scripts = scripts
        self.settings = settings
        self.run_id = run_id
        self.epoch = 0
        self.last_seq = 0
        self.round_trips = 0
        self._keys = part.run_keys(run_id)
        self.attempts: dict[str, int] = {}  # tool call id -> attempts recorded (claims count on)
        self.lease_id = ""  # the worker lease id it acquired the run under
        self.tenant = ""
        self.claimed = claimed  # (lease id, acquire_run.lua's reply) from the job's claim
        self.codec = payload_crypto.active()  # seals what commit and publish write, opens what acquire reads

    async def _run(self, script: Script, own_keys: list[Any], args: list[Any]) -> Any:
        k, a = self.scripts.frame(self.part, own_keys, args)
        if self.batcher is not None:
            return await self.batcher.run(self.part, script, k, a)
        return await self.parts.call(self.part, lambda c: script(keys=k, args=a, client=c))

    def _check_lease(self) -> None:
        if self.lease is not None and self.lease.expired():
            raise FencedError(f"run {self.run_id}: this worker is past its lease deadline")

    async def acquire(self, gen: int, worker_id: str) -> Acquired | NotAcquired:
        """``worker_id`` is the worker's lease id (keys.Partition.worker_lease); the run joins its runs set.
        A run whose job this worker claimed was acquired by the claim (``claimed``: the lease id it
        claimed under and the reply, for the job's gen): no round trip then, unless the worker has
        carried on under a new lease id since (its old one lost: the run is taken again)."""
        claimed, self.claimed = self.claimed, None
        r = claimed[1] if claimed is not None and claimed[0] == worker_id else None
        if r is None:
            if self.lease is not None and self.lease.expired():
                return NotAcquired(AcquireVerdict.NO_LEASE, "this worker is past its lease deadline")
            self.round_trips += 1
            call = Acquire(self.run_id, gen, worker_id)
            r = await self._run(self.scripts.acquire, call.keys(self.part), call.argv())
        verdict = cast(AcquireVerdict, Acquire.verdict(r))
        if verdict != AcquireVerdict.OK:
            return NotAcquired(verdict, text(r[1]) if len(r) > 1 else "")
        self.epoch = int(text(r[1]))
        self.lease_id = worker_id
        self.last_seq = int(text(r[2]) or 0)
        self.tenant = text(r[10]) if len(r) > 10 else ""
        if left := left_out(r):  # large payloads: read after the script (worker/adapters/left_out.py)
            self.round_trips += 1
            read = await read_left_out(self.parts, self.part, self.run_id, r, left, self.epoch, worker_id)
            if isinstance(read, NotAcquired):
                return read
            r = read
        try:
            if large(*(r[i] for i in (3, 4, 9, 14) if len(r) > i)):  # a fork's state, a large input
                return await off_loop(self._opened, r)
            return self._opened(r)
        except payload_crypto.DataKeyError as exc:  # the run fails with the reason (its driver), not the job
            return Acquired(self.epoch, self.last_seq, None, b"{}", "", {}, {}, int(text(r[8])), tenant=self.tenant,
                            unreadable=str(exc), opened=int(text(r[16])) if len(r) > 16 and r[16] else 0)  # fmt: skip

    def _opened(self, r: Any) -> Acquired:
        """acquire_run.lua's reply with its sealed payloads opened (shared/payload_crypto.py)."""
        flat, o = r[7], self.codec.open_json
        records = {text(flat[i]): ToolRecord.from_json(o(flat[i + 1])) for i in range(0, len(flat), 2)}
        self.attempts = {k: v.attempts for k, v in records.items()}
        return Acquired(
            epoch=self.epoch,
            last_seq=self.last_seq,
            checkpoint=o(r[3]) or None,
            input=o(r[4]),
            abort_reason=text(r[5]),
            approvals=self.codec.loads(r[6]) if r[6] else {},
            tool_records=records,
            restarts=int(text(r[8])),
            origin=(o(r[9]) or None) if len(r) > 9 else None,
            tenant=self.tenant,
            ancestry=r[11] if len(r) > 11 and r[11] else b"",
            trace=text(r[12]) if len(r) > 12 else "",
            config=(o(r[13]) or None) if len(r) > 13 else None,
            transcript=(self.codec.open_fragment(r[14]) or None) if len(r) > 14 else None,
            priority=int(text(r[15])) if len(r) > 15 and r[15] else limits.DEFAULT_PRIORITY,
            opened=int(text(r[16])) if len(r) > 16 and r[16] else 0,
            answered=text(r[17]) if len(r) > 17 and r[17] else "",
        )

    async def commit(self, step: CommitStep) -> int:
        """Append events, write the checkpoint, claims and tool records: one round trip."""
        self._check_lease()
        call, own = self._commit_call(step), [self._keys[0]]  # the run's: commit.lua builds the rest
        if step.session is not None:
            own += self.part.session_keys(step.session.session_id)
        if step.tally is not None and step.status:
            own.append(self.part.usage_day(step.tally.tenant, step.tally.day))
        if (st := step.outbox.settle) is not None:
            own += st.keys
        self.round_trips += 1
        if call.transcript_mode == "s" and large(call.transcript):  # staged by a plain SET (commit.lua)
            staged = (self.part.staged(self.run_id, secrets.token_hex(8)), call.transcript)
            call = dataclasses.replace(call, transcript=b"", transcript_staged=staged[0])
            k, a = self.scripts.frame(self.part, own, call.argv())
            r = await run_staged(self.parts, self.scripts.commit, self.part, staged, k, a)
        else:
            r = await self._run(self.scripts.commit, own, call.argv())
        if st is not None and Commit.verdict(r) in (AppendVerdict.FENCED, AppendVerdict.MISSING):
            # the call was made: its tokens count, its hold goes now
            await budgets.settle_by_call(self.parts, self.scripts, self.part, st)
        self._appended(r, call.first_seq)
        for call_id in step.outbox.claims:
            self.attempts[call_id] = self.attempts.get(call_id, 0) + 1
        return self.last_seq

    def _commit_call(self, step: CommitStep) -> Commit:
        """``step`` as commit.lua's call (shared.calls.steps.Commit), its payloads sealed. Built by
        position, in Commit's order of fields (a class called with keywords passes them as a dict:
        a third more per commit), its tail (sent up to its last field not its default) left to its
        defaults from the first field the step does not need."""
        outbox, seal, usage = step.outbox, self.codec.seal_json, step.usage
        events = [x for kind, _, payload in outbox.events for x in (kind, seal(payload))]  # ts sent once
        if outbox.claims:
            events += [x for c in outbox.claims for x in (c, self.attempts.get(c, 0) + 1)]
        if outbox.records:
            events += [x for i, rec in outbox.records for x in (i, seal(rec))]
        t_mode, t_data = "", b""
        if (tw := step.transcript) is not None:
            t_mode, t_data = "a" if tw.append else "s", self.codec.seal_fragment(tw.data)
        head = (self.epoch, self.last_seq + 1, self.lease_id, self.run_id, step.status,
                seal(step.checkpoint or b""), t_mode, t_data, len(outbox.claims), len(outbox.records),
                outbox.events[0][1] if outbox.events else None, len(outbox.events), tuple(events))  # fmt: skip
        session, st = step.session, outbox.settle
        tally = step.tally if step.status else None
        je = step.job_end if step.status else None
        rare = (step.aux or session or step.approval_timeout_ms is not None or step.run_deadline_ms is not None
                or step.error_code or tally or st or je)  # fmt: skip
        if not rare and usage is None and step.iterations is None and not step.children and not step.config:
            return Commit(*head)  # no tail
        u_in = u_out = u_read = u_write = None
        u_est = u_cost = ""
        if usage is not None:  # (a cache count 0 is never written: sent as none)
            u_in, u_out = usage.input_tokens, usage.output_tokens
            u_read, u_write = usage.cache_read_tokens or None, usage.cache_write_tokens or None
            u_est = "1" if usage.estimated else "0"
            u_cost = repr(usage.cost_usd) if usage.cost_usd is not None else ""
        mid = (step.iterations, u_in, u_out, u_est, u_cost, u_read, u_write, step.children or b"",
               seal(step.config or b""))  # fmt: skip
        if not rare:
            return Commit(*head, *mid)
        results = [x for i, r in session.tool_results for x in (i, seal(r))] if session else []
        calls = [seal(c) for c in session.calls] if session and session.calls else []
        terms = [x for term in tally.increments for x in term] if tally else []
        return Commit(
            *head, *mid, "", seal(step.aux), session.session_id if session else "",
            seal(session.loop) if session else b"", step.approval_timeout_ms, step.run_deadline_ms, step.error_code,
            tally.ttl_s if tally else None,
            st.member if st else "", st.tokens if st else None, st.nano_usd if st else None,
            st.ttl_ms if st else None,
            je.job_id if je else "", je.record if je else b"", je.keep_ms if je and je.record else None,
            len(results) // 2, len(calls), len(terms) // 2, (*results, *calls, *terms),
        )  # fmt: skip

    async def publish(self, events: list[Entry]) -> int:
        """Events alone (publish.lua: a commit's gate, no checkpoint): a model's deltas."""
        self._check_lease()
        seal = self.codec.seal_json
        call = Publish(self.epoch, self.last_seq + 1, self.lease_id, events[0][1], len(events),
                       tuple(x for kind, _, payload in events for x in (kind, seal(payload))))  # fmt: skip
        self.round_trips += 1
        r = await self._run(self.scripts.publish, call.keys(self.part, self.run_id), call.argv())
        self._appended(r, call.first_seq)
        return self.last_seq

    def _appended(self, r: Any, first: int) -> None:
        """An append's answer (commit.lua, publish.lua): the stream's new last seq, or the refusal."""
        verdict = Commit.verdict(r)
        if verdict in (AppendVerdict.FENCED, AppendVerdict.MISSING):
            raise FencedError(
                f"run {self.run_id}: epoch {self.epoch} is no longer current ({verdict})",
                deleted=verdict == AppendVerdict.MISSING,
            )
        if verdict == AppendVerdict.SEQ_CONFLICT:
            raise SeqConflictError(
                f"run {self.run_id}: expected last seq {first - 1}, stream has {text(r[1])}"
            )
        self.last_seq = int(text(r[1]))

    async def start_children(self, specs: list[ChildSpec], lineage: bytes, root: str) -> dict[str, Spawned]:
        """The children on their partitions, in this run's tenant and within its quotas (the parent's
        worker holds the run). A parent deleted meanwhile starts none (its hash is gone: one read)."""
        self._check_lease()
        run = self.part.run(self.run_id)
        if not await self.parts.call(self.part, lambda c: c.exists(run)):
            raise FencedError(f"run {self.run_id}: deleted; its children are not started", deleted=True)
        quota = Quotas(self.settings).of(self.tenant or DEFAULT_TENANT)
        return await kids.spawn(self.parts, self.scripts, parent_id=self.run_id, tenant=self.tenant,
                                lineage=lineage, specs=specs, trace=tracing.current(), root_id=root, quota=quota,
                                ttl_ms=self.settings.retention_s * 1000)  # fmt: skip

    async def parent_status(self) -> tuple[str, str]:
        return await kids.parent_status(self.parts, self.part, self.run_id)

    async def hand_off(self) -> dict[str, str]:
        return await kids.hand_off(self.parts, self.scripts, self.part, self.run_id)

    async def release(self, gen: int, *, lost: bool = False) -> str:
        """Hand the run back as dispatch gen + 1; ``lost``: past the lease deadline (release.lua)."""
        if not lost:
            self._check_lease()
        self.round_trips += 1
        call = Release(self.epoch, self.run_id, gen + 1, self.lease_id if lost else "")
        r = await self._run(self.scripts.release, call.keys(self.part), call.argv())
        return Release.verdict(r).value


class RedisSessionStore:
    """SessionStore: a session's run loops (a list) and past tool results (a hash), read raw, on
    the session's partition (a run of the session lives there too)."""

    def __init__(self, parts: Partitions[Any], clock: Clock) -> None:
        self.parts = parts
        self.clock = clock

    async def load_history(self, session_id: str | None, cfg: ContextConfig) -> list[Message]:
        """The reduced past run loops of the session."""
        if session_id is None:
            return []
        part = self.parts.home(session_id)
        key = part.session_loops(session_id)
        n = max(cfg.max_run_loops, 1)
        raw = await self.parts.call(part, lambda c: c.lrange(key, -n, -1))
        loops = [context.RunLoop.model_validate_json(payload_crypto.open_bytes(r)) for r in raw]
        return context.reduce_history(loops, cfg, self.clock.now_ms())

    async def recall(self, session_id: str | None, call: ToolCall, run_id: str | None = None) -> ToolResult:
        """The internal recall_tool_call tool: tool results by their ids, from this run's own calls
        (compacted away or not) or else from the session's past runs (one read of each hash)."""
        wanted = sessions.recall_ids(call)
        found: dict[str, ToolResult | None] = dict.fromkeys(wanted)
        if run_id is not None and wanted:
            part = self.parts.home(session_id) if session_id else self.parts.home(run_id)
            tools = part.tools(run_id)
            recs = await self.parts.call(part, lambda c: c.hmget(tools, wanted))
            for w, rec in zip(wanted, recs, strict=True):
                found[w] = (
                    ToolRecord.from_json(payload_crypto.open_bytes(rec)).recorded if rec is not None else None
                )
        missing = [w for w in wanted if found[w] is None]
        if missing and session_id is not None:
            part = self.parts.home(session_id)
            results = part.session_results(session_id)
            raws = await self.parts.call(part, lambda c: c.hmget(results, missing))
            for w, raw in zip(missing, raws, strict=True):
                found[w] = sessions.past_result(payload_crypto.open_bytes(raw))
        return sessions.recall_answer(call, list(found.items()))

    async def load_past(
        self, session_id: str | None, max_loops: int
    ) -> tuple[list[context.RunLoop], list[context.PastCall], dict[str, ToolResult]]:
        """The session's newest ``max_loops`` turns, its newest calls and their tool results
        (search_history reads them): one pipelined read of the lists, one of the results."""
        if session_id is None or max_loops <= 0:
            return [], [], {}
        part = self.parts.home(session_id)
        key, results = part.session_loops(session_id), part.session_results(session_id)
        calls_key, n = part.session_calls(session_id), sessions.MAX_SEARCHED_CALLS

        async def lists(c: Any) -> list[Any]:
            pipe = c.pipeline(transaction=False)
            pipe.lrange(key, -max_loops, -1)
            pipe.lrange(calls_key, -n, -1)
            return list(await pipe.execute())

        raw, raw_calls = await self.parts.call(part, lists)
        loops = [context.RunLoop.model_validate_json(payload_crypto.open_bytes(r)) for r in raw]
        calls = [context.PastCall.model_validate_json(payload_crypto.open_bytes(r)) for r in raw_calls]
        ids = list(
            dict.fromkeys([*(c.id for lp in loops for c in context.past_calls(lp)), *(c.id for c in calls)])
        )
        if not ids:
            return loops, calls, {}
        raws = await self.parts.call(part, lambda c: c.hmget(results, ids))
        return (
            loops,
            calls,
            {
                i: r
                for i, x in zip(ids, raws, strict=True)
                if (r := sessions.past_result(payload_crypto.open_bytes(x))) is not None
            },
        )
