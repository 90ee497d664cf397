"""The agent run as a pure transition function: ``decide(state, event) -> (state, commands)``.

Reconciles the seeds: the outer ReAct loop (idle → preparing → model_running ⇄ tool_running →
completed | failed | aborted, with awaiting_human, awaiting_tools, awaiting_children and compacting) and, inside
model_running, the model-call loop (calling → streaming → retrying → calling …). No I/O, no clock, no
randomness: time, jitter and outcomes arrive as event fields, so a recorded event sequence replays to
the same states. The runner (worker/runner/) executes the commands and feeds the outcomes back.

- state.py: Phase (with the statuses of STATUS_PHASES), CallPhase, RunState;  events.py: the input;  commands.py: the output
- table.py: the literal (node, event) → handler, next nodes table; ``decide`` dispatches on it
- handlers.py (run, model call), tool_round.py (a round of tool calls), steps.py (shared steps, the ending),
  repair.py (the final answer against responseFormat: complete, repair turn, or invalid_output)
- restore.py: a retry or fork (``Restored``): another run's state, from its checkpoint or rebuilt from its
  events up to a seq, rewound to where it can go on
- origin.py: the state a retry's or fork's origin names (the worker's ``Restored``; the producer at a fork)
- identity.py: agentmill's tool-call ids (model-call index, position); the provider's id only for the wire
- diagram.py: docs/state-machine.md drawn from the table
"""

from worker.machine.commands import (
    AwaitChildren,
    AwaitClient,
    AwaitHuman,
    AwaitModel,
    CallModel,
    Command,
    Compact,
    Decision,
    Emit,
    ExecuteTool,
    Finish,
    LoadContext,
    ModelRequest,
    OfferClientCalls,
    StartChildren,
    Wait,
)
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
from worker.machine.identity import call_id, child_run_id, identify, wire_id
from worker.machine.origin import origin_state
from worker.machine.restore import rebuild
from worker.machine.state import (
    CALLING,
    RETRYING,
    STATUS_PHASES,
    STREAMING,
    TERMINAL_PHASES,
    AnyPhase,
    CallPhase,
    IllegalTransition,
    MachineError,
    Phase,
    RunState,
    at_defaults,
    initial_state,
)
from worker.machine.steps import FINAL_ANSWER_PROMPT, build_messages, error_event, result_of
from worker.machine.table import EVERYWHERE, RESUMABLE, TABLE, TRANSITIONS, decide

__all__ = [
    "CALLING",
    "EVERYWHERE",
    "FINAL_ANSWER_PROMPT",
    "RESUMABLE",
    "RETRYING",
    "STATUS_PHASES",
    "STREAMING",
    "TABLE",
    "TERMINAL_PHASES",
    "TRANSITIONS",
    "AbortRequested",
    "AnyPhase",
    "ApprovalsDecided",
    "AwaitChildren",
    "AwaitClient",
    "AwaitHuman",
    "AwaitModel",
    "BudgetRefused",
    "CallModel",
    "CallPhase",
    "ChildrenEnded",
    "ChildrenStarted",
    "ClientResultsReceived",
    "Command",
    "Compact",
    "CompactionDone",
    "ContextLoaded",
    "DeadlineReached",
    "Decision",
    "EffectCrashed",
    "Emit",
    "Event",
    "ExecuteTool",
    "Finish",
    "IllegalTransition",
    "LoadContext",
    "MachineError",
    "ModelDeferred",
    "ModelFailed",
    "ModelReplied",
    "ModelRequest",
    "ModelStreamOpened",
    "OfferClientCalls",
    "Phase",
    "Restored",
    "Resumed",
    "RetryTimerFired",
    "RunState",
    "StartChildren",
    "StartRejected",
    "Started",
    "ToolFinished",
    "Wait",
    "at_defaults",
    "build_messages",
    "call_id",
    "child_run_id",
    "decide",
    "error_event",
    "identify",
    "initial_state",
    "mermaid",
    "origin_state",
    "rebuild",
    "result_of",
    "wire_id",
]


def mermaid() -> str:
    """The state diagram drawn from the table (imported late: ``python -m worker.machine.diagram``)."""
    from worker.machine import diagram

    return diagram.mermaid()
