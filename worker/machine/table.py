"""The transition table, and ``decide``, which dispatches on it.

``TABLE[node][event type]`` names the handler that takes the event in that node and the nodes it may
lead to. The literal below is the whole table: a (node, event) pair it does not hold raises
``IllegalTransition``; a handler that leads elsewhere raises ``MachineError``. Terminal nodes
(completed, failed, aborted) are not in it: they absorb every further event.
``docs/state-machine.md`` is drawn from it (``python -m worker.machine.diagram``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agentmill_client.statuses import RunStatus
from worker.machine.commands import Decision
from worker.machine.events import (
    AbortRequested,
    ApprovalsDecided,
    BudgetRefused,
    ChildrenEnded,
    ChildrenStarted,
    ClientResultsReceived,
    CompactionDone,
    ContextLoaded,
    DeadlineReached,
    EffectCrashed,
    Event,
    ModelDeferred,
    ModelFailed,
    ModelReplied,
    ModelStreamOpened,
    Restored,
    Resumed,
    RetryTimerFired,
    Started,
    StartRejected,
    ToolFinished,
)
from worker.machine.handlers import (
    on_abort,
    on_budget_refused,
    on_compacted,
    on_context_loaded,
    on_crashed,
    on_deadline,
    on_deferred,
    on_failed,
    on_replied,
    on_resumed_awaiting_model,
    on_resumed_compacting,
    on_resumed_model,
    on_resumed_parked,
    on_resumed_preparing,
    on_retry_timer,
    on_start_rejected,
    on_started,
    on_stream_opened,
)
from worker.machine.restore import on_restored
from worker.machine.state import (
    CALLING,
    RETRYING,
    STREAMING,
    IllegalTransition,
    MachineError,
    Phase,
    RunState,
)
from worker.machine.steps import up
from worker.machine.tool_round import (
    on_approvals,
    on_children_ended,
    on_children_started,
    on_client_results,
    on_resumed_tools,
    on_tool_finished,
)

__all__ = ["EVERYWHERE", "RESUMABLE", "TABLE", "TRANSITIONS", "Rule", "decide"]

Handler = Callable[[RunState, Any], Decision]


@dataclass(frozen=True, slots=True)
class Rule:
    handler: Handler
    to: frozenset[str]


def _rule(handler: Handler, *to: str) -> Rule:
    return Rule(handler, frozenset(to))


IDLE = Phase.IDLE.value
PREPARING = Phase.PREPARING.value
TOOL_RUNNING = Phase.TOOL_RUNNING.value
AWAITING_HUMAN = RunStatus.AWAITING_HUMAN.value
AWAITING_TOOLS = RunStatus.AWAITING_TOOLS.value
AWAITING_CHILDREN = RunStatus.AWAITING_CHILDREN.value
AWAITING_MODEL = RunStatus.AWAITING_MODEL.value
COMPACTING = Phase.COMPACTING.value
COMPLETED = RunStatus.COMPLETED.value
FAILED = RunStatus.FAILED.value
ABORTED = RunStatus.ABORTED.value

# "Ask the model again" leads to a call, to compaction first, or to failure (a limit, the deadline).
# A reply without a finish_reason is a failed attempt, so a reply may also lead where failures do.
# fmt: off
TABLE: dict[str, dict[type[Any], Rule]] = {
    IDLE: {
        Started: _rule(on_started, PREPARING),
        Restored: _rule(on_restored, CALLING, COMPACTING, FAILED, TOOL_RUNNING, AWAITING_HUMAN, AWAITING_TOOLS),
        StartRejected: _rule(on_start_rejected, FAILED),
        AbortRequested: _rule(on_abort, ABORTED),
        DeadlineReached: _rule(on_deadline, FAILED),
        EffectCrashed: _rule(on_crashed, FAILED),
    },
    PREPARING: {
        ContextLoaded: _rule(on_context_loaded, CALLING, COMPACTING, FAILED),
        Resumed: _rule(on_resumed_preparing, PREPARING),
        AbortRequested: _rule(on_abort, ABORTED),
        DeadlineReached: _rule(on_deadline, FAILED),
        EffectCrashed: _rule(on_crashed, FAILED),
    },
    CALLING: {
        ModelStreamOpened: _rule(on_stream_opened, STREAMING),
        BudgetRefused: _rule(on_budget_refused, FAILED),
        ModelReplied: _rule(on_replied, COMPLETED, TOOL_RUNNING, AWAITING_HUMAN, AWAITING_TOOLS, CALLING, COMPACTING, FAILED, RETRYING),
        ModelFailed: _rule(on_failed, RETRYING, COMPACTING, CALLING, FAILED),
        ModelDeferred: _rule(on_deferred, AWAITING_MODEL),
        Resumed: _rule(on_resumed_model, CALLING),
        AbortRequested: _rule(on_abort, ABORTED),
        DeadlineReached: _rule(on_deadline, FAILED),
        EffectCrashed: _rule(on_crashed, FAILED),
    },
    AWAITING_MODEL: {
        Resumed: _rule(on_resumed_awaiting_model, CALLING),
        AbortRequested: _rule(on_abort, ABORTED),
        DeadlineReached: _rule(on_deadline, FAILED),
        EffectCrashed: _rule(on_crashed, FAILED),
    },
    STREAMING: {
        ModelReplied: _rule(on_replied, COMPLETED, TOOL_RUNNING, AWAITING_HUMAN, AWAITING_TOOLS, CALLING, COMPACTING, FAILED, RETRYING),
        ModelFailed: _rule(on_failed, RETRYING, COMPACTING, CALLING, FAILED),
        Resumed: _rule(on_resumed_model, CALLING),
        AbortRequested: _rule(on_abort, ABORTED),
        DeadlineReached: _rule(on_deadline, FAILED),
        EffectCrashed: _rule(on_crashed, FAILED),
    },
    RETRYING: {
        RetryTimerFired: _rule(on_retry_timer, CALLING, FAILED),
        Resumed: _rule(on_resumed_model, CALLING),
        AbortRequested: _rule(on_abort, ABORTED),
        DeadlineReached: _rule(on_deadline, FAILED),
        EffectCrashed: _rule(on_crashed, FAILED),
    },
    TOOL_RUNNING: {
        ToolFinished: _rule(on_tool_finished, TOOL_RUNNING, AWAITING_TOOLS, AWAITING_CHILDREN, CALLING, COMPACTING, FAILED),
        ChildrenStarted: _rule(on_children_started, TOOL_RUNNING, AWAITING_TOOLS, AWAITING_CHILDREN, CALLING, COMPACTING, FAILED),
        Resumed: _rule(on_resumed_tools, TOOL_RUNNING, AWAITING_TOOLS, AWAITING_CHILDREN, CALLING, COMPACTING, FAILED),
        AbortRequested: _rule(on_abort, ABORTED),
        DeadlineReached: _rule(on_deadline, FAILED),
        EffectCrashed: _rule(on_crashed, FAILED),
    },
    AWAITING_HUMAN: {
        ApprovalsDecided: _rule(on_approvals, TOOL_RUNNING, AWAITING_TOOLS, CALLING, COMPACTING, FAILED),
        Resumed: _rule(on_resumed_parked, AWAITING_HUMAN),
        AbortRequested: _rule(on_abort, ABORTED),
        DeadlineReached: _rule(on_deadline, FAILED),
        EffectCrashed: _rule(on_crashed, FAILED),
    },
    AWAITING_TOOLS: {
        ClientResultsReceived: _rule(on_client_results, AWAITING_TOOLS, AWAITING_CHILDREN, CALLING, COMPACTING, FAILED),
        Resumed: _rule(on_resumed_parked, AWAITING_TOOLS),
        AbortRequested: _rule(on_abort, ABORTED),
        DeadlineReached: _rule(on_deadline, FAILED),
        EffectCrashed: _rule(on_crashed, FAILED),
    },
    AWAITING_CHILDREN: {
        ChildrenEnded: _rule(on_children_ended, AWAITING_CHILDREN, CALLING, COMPACTING, FAILED),
        Resumed: _rule(on_resumed_parked, AWAITING_CHILDREN),
        AbortRequested: _rule(on_abort, ABORTED),
        DeadlineReached: _rule(on_deadline, FAILED),
        EffectCrashed: _rule(on_crashed, FAILED),
    },
    COMPACTING: {
        CompactionDone: _rule(on_compacted, CALLING, FAILED),
        Resumed: _rule(on_resumed_compacting, COMPACTING),
        AbortRequested: _rule(on_abort, ABORTED),
        DeadlineReached: _rule(on_deadline, FAILED),
        EffectCrashed: _rule(on_crashed, FAILED),
    },
}
# fmt: on

# Views of the table (read-only projections, not completions of it).
TRANSITIONS: dict[str, dict[type[Any], frozenset[str]]] = {
    node: {ev: rule.to for ev, rule in row.items()} for node, row in TABLE.items()
}
RESUMABLE = frozenset(node for node, row in TABLE.items() if Resumed in row)
EVERYWHERE = (AbortRequested, DeadlineReached, EffectCrashed)  # in every row of the table (a test checks it)


def decide(state: RunState, event: Event) -> Decision:
    """The transition function. Terminal states absorb events; pairs outside the table raise."""
    if state.terminal:
        return state, []
    node = state.node
    row = TABLE.get(node)
    rule = row.get(type(event)) if row is not None else None
    if rule is None:
        raise IllegalTransition(node, event)
    new, commands = rule.handler(state, event)
    to = new.node
    if to not in rule.to:
        raise MachineError(f"{type(event).__name__} led {node} to {to}, outside the table")
    if to != node:
        new = _entered(new, event.now_ms)
    return new, commands


# sys.getrefcount of a state held by one local of decide's alone: that local, _entered's own and
# getrefcount's argument (CPython 3.11's count: tests/unit/test_machine_entered.py checks a state held
# elsewhere is copied, should an interpreter count otherwise)
_DECIDE_ONLY = 3


def _entered(new: RunState, now_ms: int) -> RunState:
    """``up(new, node_since_ms=now_ms)``. The state a handler made for this step is held by decide
    alone (no command, event or other state holds it: the handlers copy the fields they keep):
    that one is stamped where it is, not copied a second time (the run's every transition copied
    its some forty fields again for this one); one held anywhere else is copied."""
    if sys.getrefcount(new) <= _DECIDE_ONLY:
        new.__dict__["node_since_ms"] = now_ms
        object.__setattr__(new, "__pydantic_fields_set__", new.__pydantic_fields_set__ | {"node_since_ms"})
        return new
    return up(new, node_since_ms=now_ms)
