"""A tool round: the calls of one model reply, refused, approved, offered to the client or executed,
until every call has a result and the round closes into the next model call."""

from __future__ import annotations

import json
from typing import Any

from agentmill_client.models import EventKind, Message, RunError, RunStatus, ToolCall, ToolResult, Usage
from worker.core import policy
from worker.core.config import RunConfig
from worker.core.history_tools import LOAD_OLDER_HISTORY
from worker.machine import steps
from worker.machine.children import child_ended_emit, child_problem, child_started_emit, start_children
from worker.machine.commands import (
    AwaitChildren,
    AwaitClient,
    AwaitHuman,
    Command,
    Decision,
    Emit,
    ExecuteTool,
    OfferClientCalls,
)
from worker.machine.events import (
    ApprovalsDecided,
    ChildrenEnded,
    ChildrenStarted,
    ClientResultsReceived,
    Resumed,
    ToolFinished,
)
from worker.machine.identity import wire_id
from worker.machine.state import CallPhase, MachineError, Phase, RunState
from worker.machine.steps import error_event, final_call, finish, next_model_call, status_event, up
from worker.machine.window import expand_window

__all__ = [
    "begin_tools",
    "on_approvals",
    "on_children_ended",
    "on_children_started",
    "on_client_results",
    "on_resumed_tools",
    "on_tool_finished",
    "start_round",
    "start_tools",
]


def start_round(
    s: RunState, msg: Message, now_ms: int, finish_reason: str | None, cmds: list[Command]
) -> Decision:
    """A reply with tool calls: refuse what may not run, ask a human where needed, start the rest."""
    calls = msg.tool_calls or []
    rounds = s.tool_rounds + 1
    cfg = s.cfg
    if cfg.max_tool_rounds is not None and rounds > cfg.max_tool_rounds:
        return _refuse_round(
            s, calls, now_ms, cmds, "max_tool_rounds", f"loopLimits.maxToolRounds={cfg.max_tool_rounds}"
        )
    counted = sum(1 for c in calls if c.name not in cfg.internal_names())
    if counted and s.tool_calls_used + counted > cfg.max_tool_calls:
        return _refuse_round(
            s, calls, now_ms, cmds, "max_tool_calls", f"loopLimits.maxToolCalls={cfg.max_tool_calls}"
        )
    s = up(s, tool_rounds=rounds, round=list(calls), results={}, running=[], approvals={},
           round_called_at_ms=now_ms)  # fmt: skip
    results: dict[str, ToolResult] = {}
    used = s.tool_calls_used
    allowed = cfg.tool_names()
    cut_off = finish_reason == policy.LENGTH
    for call in calls:
        cmds.append(tool_call_emit(call, cfg, now_ms))
        problem = policy.CUT_OFF_CALL if cut_off else _precheck(call, allowed)
        if (
            problem is None and call.name in cfg.client_tools
        ):  # the caller gets only calls that fit the schema
            spec = next(t for t in cfg.tools if t.name == call.name)
            why = policy.argument_problem(spec.parameters, json.loads(call.arguments or "{}"))
            problem = None if why is None else f"error: invalid arguments: {why}"
        if problem is None and call.name in cfg.agent_tools:  # arguments, depth and cycle
            problem = child_problem(call, cfg)
        if problem is None and call.name == LOAD_OLDER_HISTORY:  # answered here: a change of the window
            s, res, note = expand_window(s, call)
            results[call.id] = res
            cmds += [note, *tool_result_emits(res, now_ms)]
            continue
        if problem is None and call.name not in cfg.internal_names():
            if cfg.max_calls_per_run is not None and used >= cfg.max_calls_per_run:
                problem = (
                    f"toolPolicy.maxCallsPerRun={cfg.max_calls_per_run} reached; the call was not executed"
                )
            else:
                used += 1
        if problem is not None:
            res = ToolResult(tool_call_id=call.id, name=call.name, content=problem, is_error=True)
            results[call.id] = res
            cmds += tool_result_emits(res, now_ms, "tool_refused")
    s = up(s, results=results, tool_calls_used=used)
    pending = [c for c in s.round if c.id not in results and c.name in cfg.approval_tools]
    if pending:
        s = up(
            s,
            phase=RunStatus.AWAITING_HUMAN,
            call=CallPhase.NONE,
            approvals={c.id: "pending" for c in pending},
        )
        cmds.append(
            status_event(
                RunStatus.AWAITING_HUMAN.value,
                pendingApprovals=[
                    {"toolCallId": c.id, "name": c.name, "arguments": c.arguments} for c in pending
                ],
            )
        )
        cmds.append(AwaitHuman(pending))
        return s, cmds
    return begin_tools(s, now_ms, cmds)


def _refuse_round(s: RunState, calls: list[ToolCall], now_ms: int, cmds: list[Command], limit: str,
                  what: str) -> Decision:  # fmt: skip
    """A loop limit refuses the whole round: fail (onLimit=fail), or answer every call with an error
    (the model input stays well-formed) and ask for the final answer without tools."""
    text = f"{what} reached"
    if s.cfg.on_limit == "fail":
        return finish(s, RunStatus.FAILED, cmds, error=RunError(code=limit, message=text))
    msgs = []
    for call in calls:
        cmds.append(tool_call_emit(call, s.cfg, now_ms))
        res = ToolResult(tool_call_id=call.id, name=call.name, content=f"error: not executed: {text}",
                         is_error=True)  # fmt: skip
        cmds += tool_result_emits(res, now_ms, "tool_refused")
        msgs.append(Message(role="tool", content=res.content, tool_call_id=call.id, name=call.name))
    s = up(s, transcript=[*s.transcript, *msgs])
    return final_call(s, now_ms, cmds, limit)


def _execution(name: str, cfg: RunConfig) -> str:
    """Who runs a call: the caller (client), a child run (agent), the worker, or the machine's own
    context (internal)."""
    if name in cfg.agent_tools:
        return "agent"
    return "client" if name in cfg.client_tools else "internal" if name in cfg.internal_names() else "worker"


def tool_call_emit(call: ToolCall, cfg: RunConfig, called_at_ms: int) -> Emit:
    return Emit(EventKind.TOOL_CALL, {"toolCallId": call.id, "providerCallId": wire_id(call), "name": call.name,
                                      "arguments": call.arguments, "execution": _execution(call.name, cfg),
                                      "calledAt": called_at_ms})  # fmt: skip


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


def tool_result_emits(
    res: ToolResult, called_at_ms: int, code: str = "tool_failed", actor: dict[str, Any] | None = None
) -> list[Command]:
    """The tool_result event (with its call's ``calledAt``, and ``actor``: who sent a client's
    result), and beside an error result the ``error`` event naming it."""
    payload = {**res.model_dump(mode="json", by_alias=True, exclude_none=True), "calledAt": called_at_ms}
    if actor:
        payload["actor"] = actor
    out: list[Command] = [Emit(EventKind.TOOL_RESULT, payload)]
    if res.is_error:
        out.append(error_event("tool", code, res.content, toolCallId=res.tool_call_id, name=res.name))
    return out


def begin_tools(s: RunState, now_ms: int, cmds: list[Command]) -> Decision:
    s = up(s, phase=Phase.TOOL_RUNNING, call=CallPhase.NONE)
    s, cmds = _offer_client_calls(s, now_ms, cmds)
    agents = s.cfg.agent_tools
    s, spawn = start_children(
        s, [c for c in s.round if c.name in agents and _ready(s, c) and c.id not in s.children]
    )
    s, cmds = start_tools(s, [*cmds, *spawn])
    if not _busy(s):
        return _after_tools(s, now_ms, cmds)
    return s, cmds


def _busy(s: RunState) -> bool:
    """Something of the round still runs in this worker: a tool call, or the creation of children."""
    return bool(s.running or s.spawning)


def _ready(s: RunState, c: ToolCall) -> bool:
    return c.id not in s.results and s.approvals.get(c.id, "approved") == "approved"


def _runnable(s: RunState) -> list[ToolCall]:
    client, agents = s.cfg.client_tools, s.cfg.agent_tools
    return [c for c in s.round if _ready(s, c) and c.id not in s.running and c.name not in client
            and c.name not in agents]  # fmt: skip


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
    s = up(s, client_waiting={**s.client_waiting, **deadlines})
    return s, [*cmds, OfferClientCalls(offer, deadlines, max(0, deadline - now_ms))]


def _after_tools(s: RunState, now_ms: int, cmds: list[Command]) -> Decision:
    """Nothing runs in the worker any more: wait for the client's results, then for the children's,
    or close the round."""
    waiting = [c for c in s.round if c.id in s.client_waiting and c.id not in s.results]
    if not waiting:
        return _await_children(s, now_ms, cmds)
    s = up(s, phase=RunStatus.AWAITING_TOOLS, call=CallPhase.NONE)
    deadlines = {c.id: s.client_waiting[c.id] for c in waiting}
    pending = [{"toolCallId": c.id, "name": c.name, "arguments": c.arguments, "deadlineMs": deadlines[c.id]}
               for c in waiting]  # fmt: skip
    return s, [
        *cmds,
        status_event(RunStatus.AWAITING_TOOLS.value, pendingToolCalls=pending),
        AwaitClient(waiting, deadlines),
    ]


def on_client_results(s: RunState, e: ClientResultsReceived) -> Decision:
    results = dict(s.results)
    cmds: list[Command] = []
    for c in s.round:
        res = e.results.get(c.id)
        if res is None or c.id not in s.client_waiting or c.id in results:
            continue
        res = ToolResult(tool_call_id=c.id, name=c.name, content=res.content, is_error=res.is_error)
        results[c.id] = res
        cmds += tool_result_emits(res, s.round_called_at_ms, "client_tool_error", e.actors.get(c.id))
    s = up(s, results=results)
    waiting = [c for c in s.round if c.id in s.client_waiting and c.id not in s.results]
    if waiting:  # still open: park again with the same deadlines
        return s, [*cmds, AwaitClient(waiting, {c.id: s.client_waiting[c.id] for c in waiting})]
    return _await_children(s, e.now_ms, cmds)


def _children_waiting(s: RunState) -> list[ToolCall]:
    return [c for c in s.round if c.id in s.children and c.id not in s.results]


def _await_children(s: RunState, now_ms: int, cmds: list[Command]) -> Decision:
    """Park until every child of the round has ended (on no worker), or close the round."""
    waiting = _children_waiting(s)
    if not waiting:
        return _close_round(s, now_ms, cmds)
    s = up(s, phase=RunStatus.AWAITING_CHILDREN, call=CallPhase.NONE)
    pending = [{"toolCallId": c.id, "name": c.name, "childRunId": s.children[c.id]} for c in waiting]
    return s, [*cmds, status_event(RunStatus.AWAITING_CHILDREN.value, pendingChildren=pending),
               AwaitChildren(waiting, {c.id: s.children[c.id] for c in waiting})]  # fmt: skip


def on_children_started(s: RunState, e: ChildrenStarted) -> Decision:
    """The children exist (child_started), or could not be created (an error result each)."""
    cmds: list[Command] = []
    results = dict(s.results)
    streams = dict(s.child_streams)
    for c in s.round:
        if c.id not in s.spawning:
            continue
        if c.id in e.failed:
            res = ToolResult(
                tool_call_id=c.id, name=c.name, content=f"error: {e.failed[c.id]}", is_error=True
            )
            results[c.id] = res
            cmds += tool_result_emits(res, s.round_called_at_ms, "child_failed")
        elif c.id in e.streams:
            streams[c.id] = e.streams[c.id]
            cmds.append(child_started_emit(s, c, e.streams[c.id]))
    done = set(e.streams) | set(e.failed)
    # a child not created is no child: the run neither waits for it nor aborts it
    kids = {k: v for k, v in s.children.items() if k not in e.failed}
    s = up(s, results=results, child_streams=streams, children=kids,
           spawning=[i for i in s.spawning if i not in done])  # fmt: skip
    if _busy(s):
        return s, cmds
    return _after_tools(s, e.now_ms, cmds)


def _take_child_results(s: RunState, results: dict[str, ToolResult], usage: dict[str, Usage]) -> Decision:
    """Results of ended children become their calls' results (child_ended, tool_result); what each
    spent is added, once, to the children's usage the run's budget counts."""
    taken = dict(s.results)
    spent = s.children_usage
    cmds: list[Command] = []
    for c in s.round:
        res = results.get(c.id)
        if res is None or c.id not in s.children or c.id in taken or c.id in s.spawning:
            continue
        res = ToolResult(tool_call_id=c.id, name=c.name, content=res.content, is_error=res.is_error)
        taken[c.id] = res
        if (u := usage.get(c.id)) is not None:
            spent = u if spent is None else spent + u
        cmds += [child_ended_emit(s, c, res), *tool_result_emits(res, s.round_called_at_ms, "child_failed")]
    return up(s, results=taken, children_usage=spent), cmds


def on_children_ended(s: RunState, e: ChildrenEnded) -> Decision:
    s, cmds = _take_child_results(s, e.results, e.usage)
    waiting = _children_waiting(s)
    if waiting:  # still open: park again
        return s, [*cmds, AwaitChildren(waiting, {c.id: s.children[c.id] for c in waiting})]
    return _close_round(s, e.now_ms, cmds)


def start_tools(s: RunState, cmds: list[Command]) -> Decision:
    free = s.cfg.max_parallel - len(s.running)
    start = _runnable(s)[: max(0, free)]
    if start:
        s = up(s, running=[*s.running, *(c.id for c in start)])
        cmds = [*cmds, *(ExecuteTool(c) for c in start)]
    return s, cmds


def on_resumed_tools(s: RunState, e: Resumed) -> Decision:
    """Unfinished calls start again, except those whose result is already recorded: those are served
    from the record (and the round may close at once)."""
    s = up(s, running=[])
    served = [c for c in _runnable(s) if c.id in e.recorded]
    cmds: list[Command] = []
    for c in served:
        cmds += tool_result_emits(e.recorded[c.id], s.round_called_at_ms)
    s = up(s, results={**s.results, **{c.id: e.recorded[c.id] for c in served}})
    # Children being created when the run stopped: created again (the same ids find the same children).
    spawning = [c for c in s.round if c.id in s.spawning]
    s = up(s, spawning=[], children={k: v for k, v in s.children.items() if k not in s.spawning})
    s, spawn = start_children(s, spawning)
    s, cmds = start_tools(s, [*cmds, *spawn])
    if served and not _busy(s):
        return _after_tools(s, e.now_ms, cmds)
    return s, cmds


def on_tool_finished(s: RunState, e: ToolFinished) -> Decision:
    res = e.result
    if res.tool_call_id not in s.running:
        raise MachineError(f"tool call {res.tool_call_id} finished but was not running")
    s = up(
        s,
        results={**s.results, res.tool_call_id: res},
        running=[i for i in s.running if i != res.tool_call_id],
    )
    s, cmds = start_tools(s, tool_result_emits(res, s.round_called_at_ms))
    if _busy(s):
        return s, cmds
    return _after_tools(s, e.now_ms, cmds)


def _close_round(s: RunState, now_ms: int, cmds: list[Command]) -> Decision:
    """Every call of the round has a result: append them in call order and ask the model again."""
    tool_msgs = [  # (a tool message's time is its call's calledAt, in its record and events)
        Message(role="tool", content=s.results[c.id].content, tool_call_id=c.id, name=c.name) for c in s.round
    ]
    s = up(s, transcript=[*s.transcript, *tool_msgs], round=[], results={}, running=[], approvals={},
            client_waiting={}, children={}, spawning=[], child_streams={})  # fmt: skip
    return next_model_call(s, now_ms, cmds)


def on_approvals(s: RunState, e: ApprovalsDecided) -> Decision:
    approvals = dict(s.approvals)
    results = dict(s.results)
    cmds: list[Command] = []
    for call in s.round:
        if approvals.get(call.id) != "pending":
            continue
        ok = e.decisions.get(call.id)
        if ok is None:
            raise MachineError(f"no decision for pending tool call {call.id}")
        approvals[call.id], why = "approved" if ok else "rejected", e.reasons.get(call.id)
        cmds.append(steps.approval_emit(call.id, call.name, approvals[call.id], why, e.actors.get(call.id)))
        if not ok:
            text = "rejected by a human" + (f": {why}" if why else "")
            res = ToolResult(tool_call_id=call.id, name=call.name, content=text, is_error=True)
            results[call.id] = res
            cmds += tool_result_emits(res, s.round_called_at_ms, "tool_rejected")
    s = up(s, approvals=approvals, results=results)
    return begin_tools(s, e.now_ms, cmds)
