"""A run that continues another run (a retry or a fork) instead of starting from its input, pure.

- ``rebuild``: a run's state at an event seq, from its events up to that seq (a fork): the input
  messages, each assistant message, and each tool round closed by its results, in the order the
  machine appends them. What the events do not carry is taken from ``base`` (the run's last
  checkpoint): its session history and configuration. A compaction is not replayed: the rebuilt
  transcript is the uncompacted one, which the new run compacts again if it is over the threshold.
- ``on_restored``: the first step of the new run (``Restored`` in ``idle``). The origin's ending is
  rewound to where it can go on: a tool round still open is resumed (results the origin had, or
  copied records of, are served; the other calls run, or are offered to the client or a human again),
  else the model is asked next, with a fork's messages appended. The ending's error, final message,
  usage and the current call's attempt are cleared; the loop counters (iterations, tool rounds,
  failures, the model-call index, so call ids never repeat) go on from the origin's.
"""

from __future__ import annotations

from typing import Any

from agentmill_client.models import EventKind, Message, RunStatus, ToolCall, ToolResult, Usage
from worker.machine.commands import AwaitHuman, Command, Decision
from worker.machine.events import Restored
from worker.machine.repair import repair_prompt
from worker.machine.state import CallPhase, Phase, RunState
from worker.machine.steps import agent_of, next_model_call, status_event, up
from worker.machine.tool_round import begin_tools, tool_result_emits
from worker.machine.window import initial_window

__all__ = ["on_restored", "rebuild"]


def rebuild(
    run_id: str,
    base: RunState | None,
    input_messages: list[Message],
    events: list[tuple[str, dict[str, Any]]],
    *,
    start: RunState | None = None,
) -> RunState:
    """The state of a run after ``events`` (kind, payload), its first events in seq order; ``start``:
    where its first event found it (a run that was itself restored), else its input."""
    if start is not None:
        s = up(start, run_id=run_id, phase=Phase.PREPARING, call=CallPhase.NONE, running=[])
    else:  # the input as the origin's start stamped it (createdAt: when it joined the run)
        at = base.started_at_ms if base is not None and base.started_at_ms else None
        stamped = [m.model_copy(update={"created_at": at}) for m in input_messages]
        s = RunState(run_id=run_id, phase=Phase.PREPARING, transcript=stamped)
    s = up(
        s,
        config=base.config if base is not None else s.config,
        history=list(base.history) if base is not None else s.history,
    )
    if start is None and s.config is not None:  # the window as the origin's first model call had it
        ctx = s.config.context
        s = up(s, context_window_size=initial_window(s.history, ctx.max_run_loops) if ctx.history_tools
               else len(s.history))  # fmt: skip
    problems: list[str] = []
    for kind, p in events:
        if kind == EventKind.ASSISTANT_MESSAGE:
            msg = Message.model_validate(p["message"])
            index = int(p.get("modelCallIndex") or s.model_call_index + 1)
            s = up(s, transcript=[*s.transcript, msg], iterations=s.iterations + 1, model_call_index=index)
            if msg.tool_calls:
                s = up(s, round=list(msg.tool_calls), results={}, tool_rounds=s.tool_rounds + 1)
        elif kind == EventKind.TOOL_CALL:
            s = up(s, round_called_at_ms=int(p.get("calledAt") or 0))
            if p.get("execution") != "internal":
                s = up(s, tool_calls_used=s.tool_calls_used + 1)
        elif kind == EventKind.TOOL_RESULT:
            s = _result(s, ToolResult.model_validate({k: v for k, v in p.items() if k != "calledAt"}))
        elif kind == EventKind.ERROR and p.get("scope") == "model":
            if p.get("code") == "invalid_output":
                problems = [str(x) for x in p.get("problems") or []]
            elif str(p.get("code", "")).startswith("model_"):
                s = up(s, failures=s.failures + 1)
        elif kind == EventKind.STATUS and p.get("status") == "repairing":
            fmt = s.config.response_format if s.config is not None else None
            if fmt is not None:
                prompt = Message(role="user", content=repair_prompt(fmt, problems))
                s = up(s, repairs=s.repairs + 1, transcript=[*s.transcript, prompt])
        elif kind == EventKind.STATUS and p.get("status") in (
            "context_window_expanded",
            "context_window_narrowed",
        ):
            s = up(s, context_window_size=int(p.get("contextWindowSize") or 0))
        elif kind == EventKind.STATUS and p.get("status") == "limit_reached":
            s = up(s, final_call=str(p.get("limit") or "max_iterations"))
    return s


def _result(s: RunState, res: ToolResult) -> RunState:
    """A tool result of the open round; the round closes (its results appended in call order) with its last."""
    if not any(c.id == res.tool_call_id for c in s.round):
        return s
    results = {**s.results, res.tool_call_id: res}
    if any(c.id not in results for c in s.round):
        return up(s, results=results)
    msgs = [
        Message(role="tool", content=results[c.id].content, tool_call_id=c.id, name=c.name) for c in s.round
    ]
    return up(s, transcript=[*s.transcript, *msgs], round=[], results={})


def on_restored(s: RunState, e: Restored) -> Decision:
    o = e.origin if e.origin is not None and e.origin.config is not None else None
    if o is None:  # the origin never started: nothing to resume but its input
        o = up(s, transcript=list(e.input_messages))
    s = up(
        o, run_id=s.run_id, session_id=None, config=e.config, started_at_ms=e.now_ms, phase=Phase.PREPARING,
        call=CallPhase.NONE, usage=Usage(), attempt=0, provider_index=0, overflow_retries=0, running=[],
        client_waiting={},
        last_error=None, final_message=None, finish_reason=None, output=None,
    )  # fmt: skip
    cmds: list[Command] = [status_event(RunStatus.RUNNING.value, **agent_of(e.config), **e.lineage)]
    if s.round and e.append:
        # Messages cannot go inside a tool round: the fork starts before the reply that opened it.
        s = up(s, transcript=_before_round(s), round=[], results={}, approvals={})
    if not s.round:
        s = up(s, transcript=[*s.transcript, *e.append])
        return next_model_call(s, e.now_ms, cmds)
    served = {c.id: e.recorded[c.id] for c in s.round if c.id not in s.results and c.id in e.recorded}
    for res in served.values():
        cmds += tool_result_emits(res, s.round_called_at_ms)
    s = up(s, results={**s.results, **served})
    pending = [c for c in s.round if c.id not in s.results and s.approvals.get(c.id) == "pending"]
    if pending:
        return _ask_again(s, pending, cmds)
    return begin_tools(s, e.now_ms, cmds)


def _before_round(s: RunState) -> list[Message]:
    ids = {c.id for c in s.round}
    cut = len(s.transcript)
    while cut > 0 and any(tc.id in ids for tc in s.transcript[cut - 1].tool_calls or ()):
        cut -= 1
    return s.transcript[:cut]


def _ask_again(s: RunState, pending: list[ToolCall], cmds: list[Command]) -> Decision:
    """Calls the origin still waited on a human for: the new run asks again."""
    s = up(s, phase=RunStatus.AWAITING_HUMAN, call=CallPhase.NONE)
    listed = [{"toolCallId": c.id, "name": c.name, "arguments": c.arguments} for c in pending]
    return s, [
        *cmds,
        status_event(RunStatus.AWAITING_HUMAN.value, pendingApprovals=listed),
        AwaitHuman(pending),
    ]
