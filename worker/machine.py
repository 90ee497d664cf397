"""The agent run as a pure transition function: ``decide(state, event) -> (state, commands)``.

Reconciles the seeds: the outer ReAct loop (idle → preparing → model_running ⇄ tool_running →
completed | failed | aborted, with awaiting_human and compacting) and, inside model_running, the
model-call loop (calling → streaming → retrying → calling …). No I/O, no clock, no randomness:
time, jitter and outcomes arrive as event fields, so a recorded event sequence replays to the
same states. The runner (worker/runner.py) executes the commands and feeds results back.

Legal moves are the data table ``TRANSITIONS``; anything else raises ``IllegalTransition``.
Terminal states absorb every further event. The README's diagram is drawn from the same table.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from pydantic import Field

from shared.models import (
    EventKind,
    Message,
    Model,
    RunError,
    RunResult,
    RunStatus,
    ToolCall,
    ToolResult,
    Usage,
)
from worker import policy
from worker.config import RECALL_TOOL, RunConfig, ToolSpec
from worker.policy import ModelFailure


class Phase(StrEnum):
    IDLE = "idle"
    PREPARING = "preparing"
    MODEL_RUNNING = "model_running"
    TOOL_RUNNING = "tool_running"
    AWAITING_HUMAN = "awaiting_human"
    AWAITING_TOOLS = "awaiting_tools"  # the round waits for client tool results, on no worker
    COMPACTING = "compacting"
    COMPLETED = "completed"
    FAILED = "failed"
    ABORTED = "aborted"


class CallPhase(StrEnum):
    """The inner model-call loop; meaningful only while the run is model_running."""

    NONE = "none"
    CALLING = "calling"
    STREAMING = "streaming"
    RETRYING = "retrying"


TERMINAL_PHASES = frozenset({Phase.COMPLETED, Phase.FAILED, Phase.ABORTED})


class MachineError(Exception):
    """Base of the machine's errors."""


class IllegalTransition(MachineError):
    def __init__(self, node: str, event: object) -> None:
        super().__init__(f"{type(event).__name__} is not legal in state {node}")
        self.node = node
        self.event = event


class RunState(Model):
    run_id: str
    session_id: str | None = None
    phase: Phase = Phase.IDLE
    call: CallPhase = CallPhase.NONE
    config: RunConfig | None = None
    history: list[Message] = Field(default_factory=list)  # reduced past run loops (seed 002)
    transcript: list[Message] = Field(default_factory=list)  # this run loop in full
    started_at_ms: int = 0
    iterations: int = 0  # successful model replies
    tool_rounds: int = 0
    tool_calls_used: int = 0
    model_call_index: int = 0
    attempt: int = 0  # retries of the current model call
    failures: int = 0  # failed model attempts over the whole run
    overflow_retries: int = 0
    compactions: int = 0
    round: list[ToolCall] = Field(default_factory=list)  # the current tool round, in model order
    results: dict[str, ToolResult] = Field(default_factory=dict)  # results of the current round
    running: list[str] = Field(default_factory=list)  # tool calls being executed now
    approvals: dict[str, str] = Field(default_factory=dict)  # toolCallId -> pending|approved|rejected
    client_waiting: dict[str, int] = Field(
        default_factory=dict
    )  # client calls offered: toolCallId -> deadline ms
    usage: Usage = Field(default_factory=Usage)
    final_message: Message | None = None
    finish_reason: str | None = None  # of the last model reply
    last_error: RunError | None = None
    node_since_ms: int = 0  # when the run entered its current node (time per state, from event times)
    final_call: str | None = None  # the loop limit reached: the model is asked, without tools, for its answer

    @property
    def node(self) -> str:
        return f"{self.phase}.{self.call}" if self.phase == Phase.MODEL_RUNNING else str(self.phase)

    @property
    def terminal(self) -> bool:
        return self.phase in TERMINAL_PHASES

    @property
    def cfg(self) -> RunConfig:
        if self.config is None:
            raise MachineError("the run has no configuration yet")
        return self.config


# ---- events: what happened (past-tense nouns); every one carries the time it happened ----


@dataclass(frozen=True, slots=True)
class Started:
    now_ms: int
    config: RunConfig
    input_messages: list[Message]


@dataclass(frozen=True, slots=True)
class ContextLoaded:
    now_ms: int
    history: list[Message]


@dataclass(frozen=True, slots=True)
class Resumed:
    """A new job took the run over from its checkpoint."""

    now_ms: int


@dataclass(frozen=True, slots=True)
class ModelStreamOpened:
    now_ms: int


@dataclass(frozen=True, slots=True)
class ModelReplied:
    """The stream ended; ``finish_reason`` is what it said (None: it stopped without saying)."""

    now_ms: int
    message: Message
    usage: Usage | None = None
    finish_reason: str | None = "stop"
    jitter: float = 0.5  # for the retry of a reply that turns out cut off
    partial: bool = False  # deltas of this attempt were already published


@dataclass(frozen=True, slots=True)
class ModelFailed:
    now_ms: int
    failure: ModelFailure
    jitter: float = 0.5  # uniform in [0, 1), drawn by the runner
    partial: bool = False  # deltas of this attempt were already published


@dataclass(frozen=True, slots=True)
class RetryTimerFired:
    now_ms: int


@dataclass(frozen=True, slots=True)
class ToolFinished:
    now_ms: int
    result: ToolResult


@dataclass(frozen=True, slots=True)
class ApprovalsDecided:
    now_ms: int
    decisions: dict[str, bool]
    reasons: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ClientResultsReceived:
    """Results of client tool calls the caller posted (the store holds them; a call past its
    deadline carries a timeout error written by the store)."""

    now_ms: int
    results: dict[str, ToolResult]


@dataclass(frozen=True, slots=True)
class CompactionDone:
    now_ms: int
    transcript: list[Message]
    removed: int
    reason: str


@dataclass(frozen=True, slots=True)
class AbortRequested:
    now_ms: int
    reason: str = "aborted by request"


@dataclass(frozen=True, slots=True)
class DeadlineReached:
    now_ms: int


Event = (
    Started
    | ContextLoaded
    | Resumed
    | ModelStreamOpened
    | ModelReplied
    | ModelFailed
    | RetryTimerFired
    | ToolFinished
    | ApprovalsDecided
    | ClientResultsReceived
    | CompactionDone
    | AbortRequested
    | DeadlineReached
)

# ---- commands: what to do next (imperatives) ----


@dataclass(frozen=True, slots=True)
class Emit:
    """Publish a RunEvent; the runner numbers it and commits it with the checkpoint."""

    kind: EventKind
    payload: dict[str, Any]


@dataclass(frozen=True, slots=True)
class LoadContext:
    session_id: str | None


@dataclass(frozen=True, slots=True)
class ModelRequest:
    run_id: str
    session_id: str | None
    messages: list[Message]
    tools: list[ToolSpec]
    model_call_index: int
    attempt: int
    failures: int
    iterations: int = 0  # successful replies so far (a scripted model's position is iterations + failures)
    purpose: str = "turn"  # "turn" | "summary" (a compaction summary, not a step of the run)


@dataclass(frozen=True, slots=True)
class CallModel:
    request: ModelRequest


@dataclass(frozen=True, slots=True)
class Wait:
    delay_ms: int


@dataclass(frozen=True, slots=True)
class ExecuteTool:
    call: ToolCall


@dataclass(frozen=True, slots=True)
class Compact:
    transcript: list[Message]
    keep_recent: int
    reason: str


@dataclass(frozen=True, slots=True)
class AwaitHuman:
    pending: list[ToolCall]


@dataclass(frozen=True, slots=True)
class OfferClientCalls:
    """Record these client calls as pending, with their deadlines, in the same commit."""

    calls: list[ToolCall]
    deadlines: dict[str, int]
    timeout_ms: int


@dataclass(frozen=True, slots=True)
class AwaitClient:
    """Park the run until every pending client call has a result (or passed its deadline)."""

    pending: list[ToolCall]
    deadlines: dict[str, int]


@dataclass(frozen=True, slots=True)
class Finish:
    result: RunResult


Command = (
    Emit | LoadContext | CallModel | Wait | ExecuteTool | Compact | AwaitHuman | OfferClientCalls | AwaitClient
    | Finish
)  # fmt: skip
Decision = tuple[RunState, list[Command]]

# ---- the table: node -> event type -> nodes it may lead to ----

_MR = Phase.MODEL_RUNNING.value
CALLING = f"{_MR}.{CallPhase.CALLING}"
STREAMING = f"{_MR}.{CallPhase.STREAMING}"
RETRYING = f"{_MR}.{CallPhase.RETRYING}"
_NEXT_CALL = {CALLING, Phase.COMPACTING.value, Phase.FAILED.value}  # what "ask the model again" can lead to
_WAIT = Phase.AWAITING_TOOLS.value
_AFTER_FAILURE = {RETRYING, Phase.COMPACTING.value, Phase.FAILED.value}
# A reply without a finish_reason is a failed attempt, so a reply may also lead where failures do.
_AFTER_REPLY = (
    {Phase.COMPLETED.value, Phase.TOOL_RUNNING.value, Phase.AWAITING_HUMAN.value, _WAIT}
    | _NEXT_CALL
    | _AFTER_FAILURE
)

TRANSITIONS: dict[str, dict[type[Any], frozenset[str]]] = {
    Phase.IDLE.value: {Started: frozenset({Phase.PREPARING.value})},
    Phase.PREPARING.value: {ContextLoaded: frozenset(_NEXT_CALL)},
    CALLING: {
        ModelStreamOpened: frozenset({STREAMING}),
        ModelReplied: frozenset(_AFTER_REPLY),
        ModelFailed: frozenset(_AFTER_FAILURE),
    },
    STREAMING: {ModelReplied: frozenset(_AFTER_REPLY), ModelFailed: frozenset(_AFTER_FAILURE)},
    RETRYING: {RetryTimerFired: frozenset({CALLING, Phase.FAILED.value})},
    Phase.TOOL_RUNNING.value: {
        ToolFinished: frozenset({Phase.TOOL_RUNNING.value, _WAIT} | _NEXT_CALL),
    },
    Phase.AWAITING_HUMAN.value: {
        ApprovalsDecided: frozenset({Phase.TOOL_RUNNING.value, _WAIT} | _NEXT_CALL),
    },
    _WAIT: {ClientResultsReceived: frozenset({_WAIT} | _NEXT_CALL)},
    Phase.COMPACTING.value: {CompactionDone: frozenset({CALLING, Phase.FAILED.value})},
}
# Legal in every non-terminal node.
_ANYWHERE: dict[type[Any], frozenset[str]] = {
    AbortRequested: frozenset({Phase.ABORTED.value}),
    DeadlineReached: frozenset({Phase.FAILED.value}),
}
RESUMABLE = {CALLING, STREAMING, RETRYING, Phase.PREPARING.value, Phase.TOOL_RUNNING.value,
             Phase.AWAITING_HUMAN.value, Phase.COMPACTING.value, _WAIT}  # fmt: skip
for _node in RESUMABLE:
    _resume_to = {CALLING if _node in (STREAMING, RETRYING) else _node}
    TRANSITIONS[_node][Resumed] = frozenset(_resume_to)
for _node, _row in TRANSITIONS.items():
    _row.update(_ANYWHERE)


def legal_events(node: str) -> dict[type[Any], frozenset[str]]:
    return TRANSITIONS.get(node, {})


def initial_state(run_id: str, session_id: str | None = None) -> RunState:
    return RunState(run_id=run_id, session_id=session_id)


def decide(state: RunState, event: Event) -> Decision:
    """The transition function. Terminal states absorb events; illegal pairs raise."""
    if state.terminal:
        return state, []
    node = state.node
    allowed = TRANSITIONS.get(node, {}).get(type(event))
    if allowed is None:
        raise IllegalTransition(node, event)
    new, commands = _HANDLERS[type(event)](state, event)
    if new.node not in allowed:
        raise MachineError(f"{type(event).__name__} led {node} to {new.node}, outside the table")
    if new.node != node:
        new = _up(new, node_since_ms=event.now_ms)
    return new, commands


# ---- handlers ----


def _up(state: RunState, **changes: Any) -> RunState:
    return state.model_copy(update=changes)


def _status(status: str, **extra: Any) -> Emit:
    return Emit(EventKind.STATUS, {"status": status, **extra})


def error_event(scope: str, code: str, message: str, **extra: Any) -> Emit:
    """The seed's ``error`` RunEvent: scope model | tool | run, a stable code, a message."""
    return Emit(EventKind.ERROR, {"scope": scope, "code": code, "message": message[:2000], **extra})


def _on_started(s: RunState, e: Started) -> Decision:
    s = _up(
        s, phase=Phase.PREPARING, config=e.config, transcript=list(e.input_messages), started_at_ms=e.now_ms
    )
    return s, [_status(RunStatus.RUNNING.value, agent=e.config.agent), LoadContext(s.session_id)]


def _on_context_loaded(s: RunState, e: ContextLoaded) -> Decision:
    return _next_model_call(_up(s, history=list(e.history)), e.now_ms, [])


def _on_resumed(s: RunState, e: Resumed) -> Decision:
    """Effects recomputed from the checkpointed state (seed: effects are a function of state)."""
    cmds: list[Command] = []
    if s.phase == Phase.PREPARING:
        cmds.append(LoadContext(s.session_id))
    elif s.phase == Phase.MODEL_RUNNING:
        s = _up(s, call=CallPhase.CALLING)
        cmds.append(CallModel(_request(s)))
    elif s.phase == Phase.TOOL_RUNNING:
        s = _up(s, running=[])
        s, cmds = _start_tools(s, cmds)
    elif s.phase == Phase.COMPACTING:
        cmds.append(Compact(list(s.transcript), s.cfg.compaction.keep_recent, "resume"))
    return s, cmds


def _on_stream_opened(s: RunState, e: ModelStreamOpened) -> Decision:
    return _up(s, call=CallPhase.STREAMING), []


def _on_replied(s: RunState, e: ModelReplied) -> Decision:
    empty = not e.message.content and not e.message.tool_calls
    if (failure := policy.reply_failure(e.finish_reason, empty=empty)) is not None:
        s = _up(s, finish_reason=e.finish_reason)
        return _on_failed(s, ModelFailed(e.now_ms, failure, e.jitter, e.partial))
    msg = e.message
    refused = len(msg.tool_calls or ()) if s.final_call else 0
    if refused:  # the last call for an answer accepts no tool calls: keep the text only
        msg = Message(role="assistant", content=msg.content)
    usage = s.usage + e.usage if e.usage else s.usage
    s = _up(s, iterations=s.iterations + 1, usage=usage, transcript=[*s.transcript, msg], attempt=0,
            finish_reason=e.finish_reason)  # fmt: skip
    cmds: list[Command] = [
        Emit(
            EventKind.ASSISTANT_MESSAGE,
            {
                "message": msg.model_dump(mode="json", by_alias=True, exclude_none=True),
                "modelCallIndex": s.model_call_index,
                "finishReason": e.finish_reason,
                **({"usage": e.usage.model_dump(by_alias=True)} if e.usage else {}),
            },
        )
    ]
    if refused:
        cmds.append(_status("tool_calls_refused", count=refused, reason=f"{s.final_call} reached"))
    if not msg.tool_calls:
        return _finish(s, RunStatus.COMPLETED, cmds, final=msg)
    rounds = s.tool_rounds + 1
    cfg = s.cfg
    if cfg.max_tool_rounds is not None and rounds > cfg.max_tool_rounds:
        text = f"loopLimits.maxToolRounds={cfg.max_tool_rounds} reached"
        if cfg.on_limit == "fail":
            return _finish(s, RunStatus.FAILED, cmds, error=RunError(code="max_tool_rounds", message=text))
        # Answer every call of the refused round (the model input stays well-formed), then ask for the answer.
        msgs = []
        for call in msg.tool_calls:
            cmds.append(_tool_call_emit(call, cfg))
            res = ToolResult(tool_call_id=call.id, name=call.name, content=f"error: not executed: {text}",
                             is_error=True)  # fmt: skip
            cmds += _tool_result_emits(res, "tool_refused")
            msgs.append(Message(role="tool", content=res.content, tool_call_id=call.id, name=call.name))
        s = _up(s, transcript=[*s.transcript, *msgs])
        return _final_call(s, e.now_ms, cmds, "max_tool_rounds")
    s = _up(s, tool_rounds=rounds, round=list(msg.tool_calls), results={}, running=[], approvals={})
    results: dict[str, ToolResult] = {}
    used = s.tool_calls_used
    allowed = cfg.tool_names()
    cut_off = e.finish_reason == policy.LENGTH
    for call in msg.tool_calls:
        cmds.append(_tool_call_emit(call, cfg))
        problem = policy.CUT_OFF_CALL if cut_off else _precheck(call, allowed)
        if (
            problem is None and call.name in cfg.client_tools
        ):  # the caller gets only calls that fit the schema
            spec = next(t for t in cfg.tools if t.name == call.name)
            why = policy.argument_problem(spec.parameters, json.loads(call.arguments or "{}"))
            problem = None if why is None else f"error: invalid arguments: {why}"
        if problem is None and call.name != RECALL_TOOL:
            if cfg.max_calls_per_run is not None and used >= cfg.max_calls_per_run:
                problem = (
                    f"toolPolicy.maxCallsPerRun={cfg.max_calls_per_run} reached; the call was not executed"
                )
            else:
                used += 1
        if problem is not None:
            res = ToolResult(tool_call_id=call.id, name=call.name, content=problem, is_error=True)
            results[call.id] = res
            cmds += _tool_result_emits(res, "tool_refused")
    s = _up(s, results=results, tool_calls_used=used)
    pending = [c for c in s.round if c.id not in results and c.name in cfg.approval_tools]
    if pending:
        s = _up(
            s, phase=Phase.AWAITING_HUMAN, call=CallPhase.NONE, approvals={c.id: "pending" for c in pending}
        )
        cmds.append(
            _status(
                RunStatus.AWAITING_HUMAN.value,
                pendingApprovals=[
                    {"toolCallId": c.id, "name": c.name, "arguments": c.arguments} for c in pending
                ],
            )
        )
        cmds.append(AwaitHuman(pending))
        return s, cmds
    return _begin_tools(s, e.now_ms, cmds)


def _execution(name: str, cfg: RunConfig) -> str:
    """Who runs a call: the caller (client), the worker, or the machine's own context (internal)."""
    return "client" if name in cfg.client_tools else "internal" if name == RECALL_TOOL else "worker"


def _tool_call_emit(call: ToolCall, cfg: RunConfig) -> Emit:
    return Emit(EventKind.TOOL_CALL, {"toolCallId": call.id, "name": call.name, "arguments": call.arguments,
                                      "execution": _execution(call.name, cfg)})  # fmt: skip


def _precheck(call: ToolCall, allowed: set[str]) -> str | None:
    if call.name not in allowed:
        return f"error: tool {call.name!r} is not available to this run"
    try:
        args = json.loads(call.arguments or "{}")
    except ValueError as exc:
        return f"error: arguments are not valid JSON ({exc})"
    if not isinstance(args, dict):
        return "error: arguments must be a JSON object"
    return None


def _tool_result_emits(res: ToolResult, code: str = "tool_failed") -> list[Command]:
    """The tool_result event, and beside an error result the ``error`` event naming it."""
    out: list[Command] = [Emit(EventKind.TOOL_RESULT, res.model_dump(mode="json", by_alias=True))]
    if res.is_error:
        out.append(error_event("tool", code, res.content, toolCallId=res.tool_call_id, name=res.name))
    return out


def _begin_tools(s: RunState, now_ms: int, cmds: list[Command]) -> Decision:
    s = _up(s, phase=Phase.TOOL_RUNNING, call=CallPhase.NONE)
    s, cmds = _offer_client_calls(s, now_ms, cmds)
    s, cmds = _start_tools(s, cmds)
    if not s.running:
        return _after_tools(s, now_ms, cmds)
    return s, cmds


def _ready(s: RunState, c: ToolCall) -> bool:
    return c.id not in s.results and s.approvals.get(c.id, "approved") == "approved"


def _runnable(s: RunState) -> list[ToolCall]:
    client = s.cfg.client_tools
    return [c for c in s.round if _ready(s, c) and c.id not in s.running and c.name not in client]


def _offer_client_calls(s: RunState, now_ms: int, cmds: list[Command]) -> Decision:
    """Client calls of the round (approved, not refused) are recorded as pending with a deadline."""
    cfg = s.cfg
    offer = [
        c for c in s.round if c.name in cfg.client_tools and _ready(s, c) and c.id not in s.client_waiting
    ]
    if not offer:
        return s, cmds
    deadline = now_ms + cfg.client_tool_timeout_ms
    if cfg.max_run_duration_ms is not None:  # a parked run has no timer: its deadline bounds the wait too
        deadline = min(deadline, s.started_at_ms + cfg.max_run_duration_ms)
    deadlines = {c.id: deadline for c in offer}
    s = _up(s, client_waiting={**s.client_waiting, **deadlines})
    return s, [*cmds, OfferClientCalls(offer, deadlines, max(0, deadline - now_ms))]


def _after_tools(s: RunState, now_ms: int, cmds: list[Command]) -> Decision:
    """Nothing runs in the worker any more: wait for the client's results, or close the round."""
    waiting = [c for c in s.round if c.id in s.client_waiting and c.id not in s.results]
    if not waiting:
        return _close_round(s, now_ms, cmds)
    s = _up(s, phase=Phase.AWAITING_TOOLS, call=CallPhase.NONE)
    deadlines = {c.id: s.client_waiting[c.id] for c in waiting}
    pending = [{"toolCallId": c.id, "name": c.name, "arguments": c.arguments, "deadlineMs": deadlines[c.id]}
               for c in waiting]  # fmt: skip
    return s, [
        *cmds,
        _status(RunStatus.AWAITING_TOOLS.value, pendingToolCalls=pending),
        AwaitClient(waiting, deadlines),
    ]


def _on_client_results(s: RunState, e: ClientResultsReceived) -> Decision:
    results = dict(s.results)
    cmds: list[Command] = []
    for c in s.round:
        res = e.results.get(c.id)
        if res is None or c.id not in s.client_waiting or c.id in results:
            continue
        res = ToolResult(tool_call_id=c.id, name=c.name, content=res.content, is_error=res.is_error)
        results[c.id] = res
        cmds += _tool_result_emits(res, "client_tool_error")
    s = _up(s, results=results)
    waiting = [c for c in s.round if c.id in s.client_waiting and c.id not in s.results]
    if waiting:  # still open: park again with the same deadlines
        return s, [*cmds, AwaitClient(waiting, {c.id: s.client_waiting[c.id] for c in waiting})]
    return _close_round(s, e.now_ms, cmds)


def _start_tools(s: RunState, cmds: list[Command]) -> Decision:
    free = s.cfg.max_parallel - len(s.running)
    start = _runnable(s)[: max(0, free)]
    if start:
        s = _up(s, running=[*s.running, *(c.id for c in start)])
        cmds = [*cmds, *(ExecuteTool(c) for c in start)]
    return s, cmds


def _on_tool_finished(s: RunState, e: ToolFinished) -> Decision:
    res = e.result
    if res.tool_call_id not in s.running:
        raise MachineError(f"tool call {res.tool_call_id} finished but was not running")
    s = _up(
        s,
        results={**s.results, res.tool_call_id: res},
        running=[i for i in s.running if i != res.tool_call_id],
    )
    s, cmds = _start_tools(s, _tool_result_emits(res))
    if s.running:
        return s, cmds
    return _after_tools(s, e.now_ms, cmds)


def _close_round(s: RunState, now_ms: int, cmds: list[Command]) -> Decision:
    """Every call of the round has a result: append them in call order and ask the model again."""
    tool_msgs = [
        Message(role="tool", content=s.results[c.id].content, tool_call_id=c.id, name=c.name) for c in s.round
    ]
    s = _up(s, transcript=[*s.transcript, *tool_msgs], round=[], results={}, running=[], approvals={},
            client_waiting={})  # fmt: skip
    return _next_model_call(s, now_ms, cmds)


def _on_approvals(s: RunState, e: ApprovalsDecided) -> Decision:
    approvals = dict(s.approvals)
    results = dict(s.results)
    cmds: list[Command] = []
    for call in s.round:
        if approvals.get(call.id) != "pending":
            continue
        ok = e.decisions.get(call.id)
        if ok is None:
            raise MachineError(f"no decision for pending tool call {call.id}")
        approvals[call.id] = "approved" if ok else "rejected"
        if not ok:
            why = e.reasons.get(call.id)
            text = "rejected by a human" + (f": {why}" if why else "")
            res = ToolResult(tool_call_id=call.id, name=call.name, content=text, is_error=True)
            results[call.id] = res
            cmds += _tool_result_emits(res, "tool_rejected")
    s = _up(s, approvals=approvals, results=results)
    return _begin_tools(s, e.now_ms, cmds)


def _on_failed(s: RunState, e: ModelFailed) -> Decision:
    f = e.failure
    cls = policy.classify(f)
    cmds: list[Command] = [
        error_event(
            "model",
            f"model_{f.reason}",
            f.message,
            retryable=cls != "fatal",
            modelCallIndex=s.model_call_index,
            attempt=s.attempt,
            **({"httpStatus": f.status} if f.status is not None else {}),
        )
    ]
    if e.partial:
        cmds.append(
            _status(
                "model_call_discarded", modelCallIndex=s.model_call_index, attempt=s.attempt, reason=f.reason
            )
        )
    cfg = s.cfg
    if cls == "overflow":
        if s.overflow_retries >= cfg.compaction.max_overflow_retries:
            err = RunError(
                code="context_overflow",
                message=f"the context is still too long after compaction: {f.message}",
            )
            return _finish(s, RunStatus.FAILED, cmds, error=err)
        s = _up(s, overflow_retries=s.overflow_retries + 1, failures=s.failures + 1)
        return _compact(s, cmds, "overflow")
    if cls == "retryable" and s.attempt < cfg.retry.max_retries:
        attempt = s.attempt + 1
        delay = policy.backoff_ms(attempt, cfg.retry, e.jitter, f.retry_after_ms)
        s = _up(s, attempt=attempt, failures=s.failures + 1, call=CallPhase.RETRYING)
        cmds.append(_status("retrying", attempt=attempt, delayMs=delay, reason=f.reason, message=f.message))
        cmds.append(Wait(delay))
        return s, cmds
    if cls == "retryable":
        err = RunError(
            code="model_retries_exhausted",
            message=f"model call failed after {s.attempt + 1} attempts: {f.reason}: {f.message}",
            retryable=True,
        )
    else:
        err = RunError(code=f"model_{f.reason}", message=f"model call failed: {f.message}")
    return _finish(_up(s, failures=s.failures + 1), RunStatus.FAILED, cmds, error=err)


def _on_retry_timer(s: RunState, e: RetryTimerFired) -> Decision:
    s = _up(s, call=CallPhase.CALLING)
    if (err := _over_time(s, e.now_ms)) is not None:
        return _finish(s, RunStatus.FAILED, [], error=err)
    return s, [CallModel(_request(s))]


def _on_compacted(s: RunState, e: CompactionDone) -> Decision:
    tokens = max(0, policy.estimate_tokens(s.transcript) - policy.estimate_tokens(e.transcript))
    s = _up(s, transcript=list(e.transcript), compactions=s.compactions + 1)
    cmds: list[Command] = [
        Emit(
            EventKind.COMPACTION,
            {
                "reason": e.reason,
                "removed": e.removed,
                "messages": len(e.transcript),
                "removedTokens": tokens,
            },
        )
    ]
    if (err := _over_time(s, e.now_ms)) is not None:
        return _finish(s, RunStatus.FAILED, cmds, error=err)
    return _call(s, e.now_ms, cmds)


def _on_abort(s: RunState, e: AbortRequested) -> Decision:
    return _finish(s, RunStatus.ABORTED, [], error=RunError(code="aborted", message=e.reason))


def _on_deadline(s: RunState, e: DeadlineReached) -> Decision:
    return _finish(s, RunStatus.FAILED, [], error=_duration_error(s))


# ---- shared steps ----


def _duration_error(s: RunState) -> RunError:
    limit = s.config.max_run_duration_ms if s.config is not None else None
    return RunError(code="max_run_duration", message=f"loopLimits.maxRunDurationMs={limit} reached")


def _over_time(s: RunState, now_ms: int) -> RunError | None:
    limit = s.cfg.max_run_duration_ms
    if limit is not None and now_ms - s.started_at_ms >= limit:
        return _duration_error(s)
    return None


def _next_model_call(s: RunState, now_ms: int, cmds: list[Command]) -> Decision:
    """Check the loop limits and compaction threshold, then ask the model."""
    cfg = s.cfg
    if (err := _over_time(s, now_ms)) is not None:
        return _finish(s, RunStatus.FAILED, cmds, error=err)
    if s.iterations >= cfg.max_iterations:
        text = f"loopLimits.maxIterations={cfg.max_iterations} reached"
        if cfg.on_limit == "fail":
            return _finish(s, RunStatus.FAILED, cmds, error=RunError(code="max_iterations", message=text))
        return _final_call(s, now_ms, cmds, "max_iterations")
    comp = cfg.compaction
    if (
        len(s.transcript) > comp.max_messages
        or policy.estimate_tokens(s.transcript) > comp.max_estimated_tokens
    ):
        return _compact(s, cmds, "threshold")
    return _call(s, now_ms, cmds)


def _call(s: RunState, now_ms: int, cmds: list[Command]) -> Decision:
    s = _up(
        s,
        phase=Phase.MODEL_RUNNING,
        call=CallPhase.CALLING,
        model_call_index=s.model_call_index + 1,
        attempt=0,
    )
    return s, [*cmds, CallModel(_request(s))]


def _final_call(s: RunState, now_ms: int, cmds: list[Command], limit: str) -> Decision:
    """A loop limit was reached with onLimit=answer: one last model call, without tools."""
    s = _up(s, final_call=limit)
    return _call(s, now_ms, [*cmds, _status("limit_reached", limit=limit, action="final_answer")])


FINAL_ANSWER_PROMPT = (
    "The run has reached its limit ({limit}). Tools are no longer available. Using what you have "
    "found so far, give your final answer now."
)


def _compact(s: RunState, cmds: list[Command], reason: str) -> Decision:
    s = _up(s, phase=Phase.COMPACTING, call=CallPhase.NONE)
    return s, [
        *cmds,
        _status("compacting", reason=reason),
        Compact(list(s.transcript), s.cfg.compaction.keep_recent, reason),
    ]


def build_messages(s: RunState) -> list[Message]:
    """System prompt + reduced past run loops + the current run loop in full (seed 002)."""
    return [Message(role="system", content=s.cfg.system_prompt), *s.history, *s.transcript]


def _request(s: RunState) -> ModelRequest:
    cfg = s.cfg
    messages = build_messages(s)
    if s.final_call:
        messages.append(Message(role="user", content=FINAL_ANSWER_PROMPT.format(limit=s.final_call)))
    return ModelRequest(
        run_id=s.run_id,
        session_id=s.session_id,
        messages=messages,
        tools=[] if s.final_call else [*cfg.tools, *cfg.internal_tools],
        model_call_index=s.model_call_index,
        attempt=s.attempt,
        failures=s.failures,
        iterations=s.iterations,
    )


def _finish(
    s: RunState,
    status: RunStatus,
    cmds: list[Command],
    *,
    final: Message | None = None,
    error: RunError | None = None,
) -> Decision:
    phase = {
        RunStatus.COMPLETED: Phase.COMPLETED,
        RunStatus.FAILED: Phase.FAILED,
        RunStatus.ABORTED: Phase.ABORTED,
    }[status]
    s = _up(s, phase=phase, call=CallPhase.NONE, final_message=final, last_error=error, running=[])
    result = result_of(s)
    payload: dict[str, Any] = {"status": status.value, "iterations": s.iterations}
    if result.stop_reason:
        payload["stopReason"] = result.stop_reason
    if final is not None and s.finish_reason is not None:
        payload["finishReason"] = s.finish_reason
    if error is not None:
        payload["error"] = error.model_dump(by_alias=True)
    if error is not None and status == RunStatus.FAILED:
        cmds = [*cmds, error_event("run", error.code, error.message, retryable=error.retryable)]
    return s, [*cmds, Emit(EventKind.STATUS, payload), Finish(result)]


def result_of(s: RunState) -> RunResult:
    status = {
        Phase.COMPLETED: RunStatus.COMPLETED,
        Phase.FAILED: RunStatus.FAILED,
        Phase.ABORTED: RunStatus.ABORTED,
        Phase.AWAITING_HUMAN: RunStatus.AWAITING_HUMAN,
        Phase.AWAITING_TOOLS: RunStatus.AWAITING_TOOLS,
        Phase.IDLE: RunStatus.QUEUED,
    }.get(s.phase, RunStatus.RUNNING)
    return RunResult(
        session_id=s.session_id,
        run_id=s.run_id,
        status=status,
        final_assistant_message=s.final_message,
        last_error=s.last_error,
        usage=s.usage,
        iterations=s.iterations,
        stop_reason=s.final_call if s.phase == Phase.COMPLETED else None,
        finish_reason=s.finish_reason,
    )


_HANDLERS: dict[type[Any], Callable[[RunState, Any], Decision]] = {
    Started: _on_started,
    ContextLoaded: _on_context_loaded,
    Resumed: _on_resumed,
    ModelStreamOpened: _on_stream_opened,
    ModelReplied: _on_replied,
    ModelFailed: _on_failed,
    RetryTimerFired: _on_retry_timer,
    ToolFinished: _on_tool_finished,
    ApprovalsDecided: _on_approvals,
    ClientResultsReceived: _on_client_results,
    CompactionDone: _on_compacted,
    AbortRequested: _on_abort,
    DeadlineReached: _on_deadline,
}


def mermaid() -> str:
    """The state diagram, drawn from TRANSITIONS (the README embeds this output)."""
    lines = ["stateDiagram-v2", "    [*] --> idle"]
    edges: dict[tuple[str, str], list[str]] = {}
    for src, row in TRANSITIONS.items():
        for ev, targets in row.items():
            if ev in _ANYWHERE:
                continue
            for dst in sorted(targets):
                edges.setdefault((src, dst), []).append(ev.__name__)
    for (src, dst), names in sorted(edges.items()):
        lines.append(f"    {_mid(src)} --> {_mid(dst)}: {', '.join(sorted(names))}")
    lines.append("    note right of aborted: AbortRequested from any non-terminal state")
    lines.append("    note right of failed: DeadlineReached from any non-terminal state")
    for t in sorted(TERMINAL_PHASES):
        lines.append(f"    {t.value} --> [*]")
    return "\n".join(lines)


def _mid(node: str) -> str:
    return node.replace(".", "__")
