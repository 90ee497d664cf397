"""The ports of worker/ports.py in memory, for unit tests of the runner: no Redis, no sockets.

``MemoryRun`` is what Redis holds for one run (hash, stream, tool records); a ``MemoryRunStore`` is
one worker's handle on it at one epoch, so two handles on the same run are two workers, and the
older one is fenced the way the Lua scripts fence it. The store keeps the promises of
acquire.lua, commit.lua, release.lua and tool_results.lua (``post_tool_results``) that
tests/integration/test_run_store_contract.py states for both stores; it does not model dispatch
numbers (``gen``), the crash budget (``exhausted``) or a commit re-sent after its reply was lost.
``MemoryRun`` lives in memory_run.py, ``MemorySessionStore`` in memory_sessions.py.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from agentmill_client.models import RunError, RunInput, RunResult, RunStatus, ToolCall, ToolResult
from shared.calls.steps import AcquireVerdict
from shared.children import ChildSpec, Spawned
from shared.profiles import AgentProfile
from shared.provider_config import ProviderConfig
from shared.settings import Settings
from shared.tool_records import ToolRecord, ToolState
from worker.adapters.lease import WorkerLease
from worker.adapters.memory_run import MemoryRun
from worker.adapters.memory_sessions import MemorySessionStore
from worker.adapters.plain import NoFailpoints, SystemClock
from worker.core import sessions
from worker.core.acquisition import Acquired, NotAcquired
from worker.core.commit_step import CommitStep, Entry, Outbox
from worker.core.config_cache import ConfigCache
from worker.core.delta_pace import DeltaPace
from worker.core.store_errors import FencedError, SeqConflictError
from worker.core.tool_retry import ToolRetry
from worker.machine import TERMINAL_PHASES
from worker.models.base import ModelProvider
from worker.ports import Capacity, Clock, Failpoints, OnWait
from worker.telemetry.observer import NullObserver, Observer
from worker.tools.base import ToolContext
from worker.tools.registry import Toolbox

__all__ = [
    "MemoryHost", "MemoryModels", "MemoryRun", "MemoryRunStore", "MemorySessionStore", "MemoryTools", "finalize",
    "post_tool_results",
]  # fmt: skip

_TERMINAL = {p.value for p in TERMINAL_PHASES}


class MemoryRunStore:
    """RunStore on a MemoryRun: epochs fence older handles; seqs must follow on."""

    opens = True  # its acquisitions write a new run's opening event, as acquire_run.lua does

    def __init__(
        self, run: MemoryRun, sessions: MemorySessionStore | None = None, clock: Clock | None = None
    ) -> None:
        self.run = run
        self.sessions = sessions
        self.clock = clock or SystemClock()  # decides client calls' deadlines (Redis's TIME does there)
        self.epoch = 0
        self.last_seq = 0
        self.slot = -1  # no budget settlement goes with a commit here (BudgetPort holds settle themselves)
        self.commits = 0
        self.worker_id = ""  # the worker it acquired the run as

    def _alive(self, worker_id: str) -> bool:
        return self.run.live is None or worker_id in self.run.live

    async def acquire(self, gen: int, worker_id: str) -> Acquired | NotAcquired:
        r = self.run
        if r.status in _TERMINAL:
            return NotAcquired(AcquireVerdict.TERMINAL, r.status)
        if not self._alive(worker_id):
            return NotAcquired(AcquireVerdict.NO_LEASE, worker_id)
        if not (r.owner == worker_id and r.status == RunStatus.RUNNING.value):  # else: its own, again
            if r.owner and r.live is not None and r.owner in r.live:
                return NotAcquired(AcquireVerdict.BUSY, r.owner)
            if r.owner:
                r.restarts += 1  # taken over from a worker lost without handing it back
            r.epoch += 1
            r.owner, r.status = worker_id, RunStatus.RUNNING.value
        if self.opens and not (r.opened or r.checkpoint or r.origin):  # as acquire_run.lua opens it
            i = orjson.loads(r.input)
            version = {} if i.get("agentVersion") is None else {"agentVersion": i["agentVersion"]}
            payload = orjson.dumps(
                {"status": RunStatus.RUNNING.value, "agent": i.get("agent", ""), **version}
            )
            r.opened = len(r.events) + 1
            r.events.append((r.opened, "status", int(time.time() * 1000), payload))
        self.worker_id = worker_id
        self.epoch, self.last_seq = r.epoch, len(r.events)
        return Acquired(self.epoch, self.last_seq, r.checkpoint, r.input, r.abort_reason, dict(r.approvals),
                        {k: ToolRecord.from_dict(v) for k, v in r.tools.items()}, r.restarts,
                        r.origin if r.checkpoint is None else None, config=r.config,
                        transcript=r.transcript, opened=r.opened, answered=r.answered)  # fmt: skip

    async def commit(self, step: CommitStep) -> int:
        outbox = step.outbox
        r = self.run
        if r.epoch != self.epoch:
            raise FencedError(f"run {r.run_id}: epoch {self.epoch} is no longer current (fenced)")
        if r.owner != self.worker_id or not self._alive(self.worker_id):
            raise FencedError(
                f"run {r.run_id}: no longer held by {self.worker_id!r} (ended, parked or its lease lapsed)"
            )
        if self.last_seq != len(r.events):
            raise SeqConflictError(
                f"run {r.run_id}: expected last seq {self.last_seq}, stream has {len(r.events)}"
            )
        for kind, ts, payload in outbox.events:
            r.events.append((len(r.events) + 1, kind, ts, payload))
        for call_id in outbox.claims:
            prev = r.tools.get(call_id)
            r.tools[call_id] = ToolRecord.claim(
                self.epoch, ToolRecord.from_dict(prev) if prev else None
            ).to_dict()
        for call_id, rec in outbox.records:
            r.tools[call_id] = ToolRecord.from_json(rec).to_dict()
        if step.checkpoint:
            r.checkpoint = step.checkpoint
        if step.config:
            r.config = step.config
        if step.transcript is not None:
            r.transcript = (
                (r.transcript or b"") + step.transcript.data
                if step.transcript.append
                else step.transcript.data
            )
        if step.iterations is not None:
            r.iterations = step.iterations
        if step.usage is not None:
            r.usage = step.usage
        if step.status:
            r.status, r.owner = step.status, ""
            if step.status in _TERMINAL:
                r.result = step.aux
                r.error_code = step.error_code or r.error_code
                if step.session is not None and self.sessions is not None:
                    self.sessions.apply(step.session)  # a session's history changes only when a run ends
            else:
                r.aux = step.aux
        if step.status == RunStatus.AWAITING_HUMAN.value:
            r.approvals = orjson.loads(step.aux) if step.aux else {}
        parked_on_client = step.status == RunStatus.AWAITING_TOOLS.value
        if parked_on_client and _settle_client_calls(r, self.clock.now_ms()) == 0:
            r.status = RunStatus.QUEUED.value  # every call answered or timed out: back on the queue
        self.last_seq = len(r.events)
        self.commits += 1
        return self.last_seq

    async def publish(self, events: list[Entry]) -> int:
        return await self.commit(CommitStep(Outbox(events)))

    async def start_children(self, specs: list[ChildSpec], lineage: bytes, root: str) -> dict[str, Spawned]:
        """One run in memory has no children: every one is refused (sub-agents need Redis)."""
        return {s.call_id: Spawned(error="sub-agents need the Redis store") for s in specs}

    async def hand_off(self) -> dict[str, str]:
        return {}

    async def parent_status(self) -> tuple[str, str]:
        return "", ""

    async def release(self, gen: int, *, lost: bool = False) -> str:
        r = self.run
        if r.epoch != self.epoch:
            return "fenced"
        if r.status in _TERMINAL:
            return "terminal"
        if lost:  # as a lapsed lease's run, taken over: a lost attempt
            if r.status != RunStatus.RUNNING.value or r.owner != self.worker_id:
                return "fenced"
            r.restarts += 1
        r.status, r.owner = RunStatus.QUEUED.value, ""
        return "released"


def _settle_client_calls(r: MemoryRun, now: int) -> int:
    """The parked run's client calls (``aux``) past their deadline get a timeout error as their
    result (prelude.lua client_settle); how many are still open."""
    still_open = 0
    for pending in orjson.loads(r.aux or b"[]"):
        call_id = pending["toolCallId"]
        if call_id not in r.tools:
            continue
        rec = ToolRecord.from_dict(r.tools[call_id])
        if rec.state != ToolState.CLIENT_PENDING:
            continue
        if now >= rec.deadline_ms:
            r.tools[call_id] = rec.timed_out_as(call_id).to_dict()
        else:
            still_open += 1
    return still_open


def post_tool_results(
    run: MemoryRun, results: list[tuple[str, str, bool]], now: int, actor: dict[str, Any] | None = None
) -> str:
    """A caller's results for client calls (call id, content, is error), all or none, as tool_results.lua
    records them: recorded | resumed, or the first refusal (unknown_call, not_client, timed_out,
    conflict, finished). When the parked run has no call left open, its first call's ``tool_result``
    is written at the next seq, named in ``answered``, and the run goes back on the queue. Not
    modelled: tenants, sealing at rest, the event's epoch, and workers of an earlier release (every
    live one is taken to know ``answered``)."""
    finished = run.status in _TERMINAL
    new: dict[str, ToolRecord] = {}
    for call_id, content, is_error in results:
        if call_id not in run.tools:
            return "finished" if finished else "unknown_call"
        rec = ToolRecord.from_dict(run.tools[call_id])
        if finished and not rec.done:
            return "finished"
        if not rec.client:
            return "not_client"
        prev = new[call_id].result if call_id in new else None
        if rec.done:
            if rec.timed_out:
                return "timed_out"
            prev = rec.result
        elif prev is None and now >= rec.deadline_ms:
            return "timed_out"
        if prev is not None:
            if (prev.content, prev.is_error) != (content, is_error):
                return "finished" if finished else "conflict"
            continue
        result = ToolResult(tool_call_id=call_id, name=rec.name, content=content, is_error=is_error)
        new[call_id] = ToolRecord(ToolState.DONE, client=True, called_at_ms=rec.called_at_ms, actor=actor,
                                  result=result)  # fmt: skip
    run.tools.update((i, rec.to_dict()) for i, rec in new.items())
    if run.status != RunStatus.AWAITING_TOOLS.value or _settle_client_calls(run, now) != 0:
        return "recorded"
    _answer_event(run, now)
    run.status, run.owner = RunStatus.QUEUED.value, ""
    return "resumed"


def _answer_event(run: MemoryRun, now: int) -> None:
    """The round's first client call's ``tool_result``, as tool_results.lua first_result_event writes
    it: only for a result a client sent (a timed-out call's is left to the worker)."""
    pending = orjson.loads(run.aux or b"[]")
    call_id = pending[0]["toolCallId"] if pending else None
    if call_id is None or call_id not in run.tools:
        return
    rec = ToolRecord.from_dict(run.tools[call_id])
    if not rec.done or rec.timed_out or rec.result is None or not rec.called_at_ms:
        return
    res = rec.result
    payload = {"toolCallId": call_id, "name": res.name, "content": res.content, "isError": res.is_error,
               "calledAt": rec.called_at_ms, **({"actor": rec.actor} if rec.actor else {})}  # fmt: skip
    seq = len(run.events) + 1
    run.events.append((seq, "tool_result", now, orjson.dumps(payload)))
    run.answered = f"{seq}:tool_result:{call_id}"


def finalize(
    run: MemoryRun, session_store: MemorySessionStore | None, status: RunStatus, code: str, message: str
) -> bool:
    """End a run from outside its worker, as prelude.lua's finalize does (an abort while queued or
    parked, an approval timeout): its status event, its result with ``code`` and ``message``, its
    epoch bumped so a worker still holding it is fenced, and the calls its records hold in its
    session, as a worker's ending leaves them (worker/core/sessions.py). False, and nothing written, when
    the run had ended already: its calls reach its session once."""
    if run.status in _TERMINAL:
        return False
    sid = RunInput.model_validate_json(run.input).session_id
    error = RunError(code=code, message=message)
    result = RunResult(run_id=run.run_id, status=status, iterations=run.iterations, last_error=error,
                       session_id=sid, usage=run.usage)  # fmt: skip
    now = SystemClock().now_ms()
    if status == RunStatus.FAILED:
        run.events.append(
            (len(run.events) + 1, "error", now, orjson.dumps({"scope": "run", **error.model_dump()}))
        )
    payload = {"status": status.value, "iterations": run.iterations, "error": error.model_dump()}
    run.events.append((len(run.events) + 1, "status", now, orjson.dumps(payload)))
    run.status, run.owner, run.epoch, run.error_code = status.value, "", run.epoch + 1, code
    run.result, run.abort_reason = result.model_dump_json(by_alias=True).encode(), ""
    if sid is not None and session_store is not None:
        records = {k: ToolRecord.from_dict(v) for k, v in run.tools.items()}
        session_store.apply(sessions.calls_update(sid, sessions.session_calls(run.run_id, records)))
    return True


class MemoryModels:
    """ModelPort: a provider per profile name (or one for all); no limits."""

    def __init__(self, provider: Callable[[AgentProfile], ModelProvider]) -> None:
        self._provider = provider
        self.holds = 0

    def provider(self, profile: AgentProfile, index: int = 0) -> ModelProvider:
        """A fallback's provider is made as for a profile whose one provider it is."""
        if index == 0:
            return self._provider(profile)
        return self._provider(
            profile.model_copy(update={"provider": profile.chain[index], "providers": None})
        )

    async def hold(self, cfg: ProviderConfig, tokens: int, on_wait: OnWait, priority: int) -> Capacity:
        self.holds += 1
        return _Unlimited()

    async def pause(self, cfg: ProviderConfig, ms: int) -> None:
        return None


class _Unlimited:
    async def release(self, actual_tokens: int | None) -> None:
        return None


class MemoryTools(Toolbox):
    """ToolPort: the profile's builtin tools, noting each call it executes."""

    def __init__(self) -> None:
        super().__init__(None)
        self.executed: list[str] = []

    async def execute(
        self,
        profile: AgentProfile,
        call: ToolCall,
        ctx: ToolContext,
        on_retry: Callable[[ToolRetry], Awaitable[None]] | None = None,
    ) -> ToolResult:
        self.executed.append(call.id)
        return await super().execute(profile, call, ctx, on_retry)


@dataclass
class MemoryHost:
    """Host: what a worker process shares with its runs, without a process."""

    profiles: dict[str, AgentProfile]
    settings: Settings = field(default_factory=Settings)
    observer: Observer = field(default_factory=NullObserver)
    lease: WorkerLease | None = None
    lease_id: str = "memory-worker"
    draining: bool = False
    failpoints: Failpoints = field(default_factory=NoFailpoints)
    configs: ConfigCache = field(default_factory=ConfigCache)
    pace: DeltaPace = field(init=False)

    def __post_init__(self) -> None:
        self.pace = DeltaPace(self.settings.delta_flush_ms, self.settings.delta_flush_per_s)

    def profile(self, name: str) -> AgentProfile:
        try:
            return self.profiles[name]
        except KeyError:
            raise LookupError(f"no profile named {name!r}") from None

    async def agent(self, tenant: str, name: str, version: int) -> AgentProfile:
        """A tenant's agent version: here, the profile ``name@version`` (tests add them to profiles)."""
        return self.profile(f"{name}@{version}")
