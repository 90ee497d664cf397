"""Sub-agents in a tool round, the parts that need nothing else of the round: whether a sub-agent call
may start a child (its arguments, the depth limit, a cycle), the command that creates the children,
and the events a child's start and ending publish. The round's handlers (tool_round.py) use them."""

from __future__ import annotations

import json

from agentmill_client.models import EventKind, ToolCall, ToolResult
from worker.core import policy
from worker.core.config import RunConfig
from worker.machine.budget import remainder, share
from worker.machine.commands import Emit, StartChildren
from worker.machine.identity import child_run_id
from worker.machine.state import RunState
from worker.machine.steps import up

__all__ = [
    "child_ended_emit",
    "child_problem",
    "child_started_emit",
    "child_task",
    "children_record",
    "start_children",
]


def children_record(s: RunState) -> list[dict[str, str]]:
    """The round's children as the run hash keeps them (RunField.CHILDREN: settled on while parked,
    aborted when the run ends otherwise than completed)."""
    return [{"toolCallId": k, "runId": v} for k, v in s.children.items()]


def child_problem(call: ToolCall, cfg: RunConfig) -> str | None:
    """Why this sub-agent call may not start a child (an error result the model sees), or None."""
    spec = next((t for t in cfg.tools if t.name == call.name), None)
    args = json.loads(call.arguments or "{}")
    if spec is not None and (why := policy.argument_problem(spec.parameters, args)) is not None:
        return f"error: invalid arguments: {why}"
    agent = cfg.agent_tools[call.name]
    depth = len(cfg.ancestors) + 1  # the child's
    if depth > cfg.max_depth:
        return (f"error: sub-agent refused: loopLimits.maxDepth={cfg.max_depth} reached (this run is at depth "
                f"{depth - 1}; a child of it would be at depth {depth})")  # fmt: skip
    chain = [*cfg.ancestors, cfg.agent]
    if agent in chain:
        return (f"error: sub-agent refused: agent {agent!r} is already in this run's chain "
                f"({' -> '.join([*chain, agent])}): a cycle")  # fmt: skip
    return None


def child_task(call: ToolCall) -> str:
    """The child's user message: the call's ``task``, else its arguments as JSON."""
    try:
        args = json.loads(call.arguments or "{}")
    except ValueError:
        return call.arguments
    task = args.get("task") if isinstance(args, dict) else None
    return task if isinstance(task, str) and task else (call.arguments or "{}")


def start_children(s: RunState, calls: list[ToolCall]) -> tuple[RunState, list[StartChildren]]:
    """The children of these calls are being created (each id derived from the run's and the call's)."""
    if not calls:
        return s, []
    ids = {c.id: child_run_id(s.run_id, c.id) for c in calls}
    s = up(s, children={**s.children, **ids}, spawning=[*s.spawning, *ids])
    # The round's children share what the run has left (a resumed round divides it the same way).
    return s, [StartChildren(calls, ids, share(remainder(s), len(s.children)))]


def child_started_emit(s: RunState, call: ToolCall, stream_key: str) -> Emit:
    return Emit(EventKind.CHILD_STARTED, {"toolCallId": call.id, "name": call.name, "agent": s.cfg.agent_tools.get(call.name, ""),
                                          "childRunId": s.children[call.id], "streamKey": stream_key})  # fmt: skip


def child_ended_emit(s: RunState, call: ToolCall, res: ToolResult) -> Emit:
    return Emit(EventKind.CHILD_ENDED, {"toolCallId": call.id, "childRunId": s.children[call.id],
                                        "streamKey": s.child_streams.get(call.id, ""), "isError": res.is_error})  # fmt: skip
