"""The run's state: the outer phase, the model-call loop inside ``model_running``, and the checkpoint.

The outer phase is a run status where the machine's state is one (awaiting a human, the client's
tools or the child runs; ended), else a ``Phase``: a state of the machine no status names (a worker
holds the run then, and its status is running)."""

from __future__ import annotations

from enum import StrEnum
from itertools import compress
from operator import itemgetter, not_
from typing import Any

from pydantic import Field

from agentmill_client.models import Message, Model, RunError, ToolCall, ToolResult, Usage
from agentmill_client.statuses import TERMINAL, RunStatus
from shared.model_copies import copied
from worker.core.config import RunConfig

__all__ = [
    "CALLING",
    "RETRYING",
    "STATUS_PHASES",
    "STREAMING",
    "TERMINAL_PHASES",
    "AnyPhase",
    "CallPhase",
    "IllegalTransition",
    "MachineError",
    "Phase",
    "RunState",
    "at_defaults",
    "initial_state",
]


class Phase(StrEnum):
    """The machine's states that are no run status: each is ``running`` to a caller."""

    IDLE = "idle"
    PREPARING = "preparing"
    MODEL_RUNNING = "model_running"
    TOOL_RUNNING = "tool_running"
    COMPACTING = "compacting"


# The run statuses the machine is in as states of its own: the round waits for a human's decision,
# for client tool results or for its child runs (sub-agents), on no worker; or the run has ended.
STATUS_PHASES = (
    RunStatus.AWAITING_HUMAN,
    RunStatus.AWAITING_TOOLS,
    RunStatus.AWAITING_CHILDREN,
    RunStatus.AWAITING_MODEL,
    RunStatus.COMPLETED,
    RunStatus.FAILED,
    RunStatus.ABORTED,
)
AnyPhase = Phase | RunStatus  # RunState.phase: a Phase or one of STATUS_PHASES


class CallPhase(StrEnum):
    """The inner model-call loop; meaningful only while the run is model_running."""

    NONE = "none"
    CALLING = "calling"
    STREAMING = "streaming"
    RETRYING = "retrying"


# The machine's own endings: a status ended outside it (superseded, before any worker took the run) is no phase.
TERMINAL_PHASES = TERMINAL & frozenset(STATUS_PHASES)

# Each (phase, call) pair's node name, built once: RunState.node is read on every event (the table's
# lookup, the metrics' transitions) and formatting two enums each time was 2 % of a run's CPU.
_NODES: dict[tuple[str, str], str] = {
    (p, c): f"{p.value}.{c.value}" if p == Phase.MODEL_RUNNING else p.value
    for p in (*Phase, *STATUS_PHASES)
    for c in CallPhase
}


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
    phase: AnyPhase = Phase.IDLE
    call: CallPhase = CallPhase.NONE
    config: RunConfig | None = None
    history: list[Message] = Field(default_factory=list)  # reduced past run loops
    context_window_size: int | None = None  # newest history messages the model sees (None: all; window.py)
    transcript: list[Message] = Field(default_factory=list)  # this run loop in full
    started_at_ms: int = 0
    iterations: int = 0  # successful model replies
    tool_rounds: int = 0
    tool_calls_used: int = 0
    model_call_index: int = 0
    attempt: int = 0  # retries of the current model call (on its current provider)
    provider_index: int = 0  # the provider of the fallback chain the current model call is on
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
    children: dict[str, str] = Field(default_factory=dict)  # the round's sub-agent calls -> child run ids
    spawning: list[str] = Field(default_factory=list)  # sub-agent calls whose child is being created now
    child_streams: dict[str, str] = Field(default_factory=dict)  # toolCallId -> the child's stream key
    usage: Usage = Field(default_factory=Usage)  # the run's own model calls
    economy_usage: Usage | None = None  # of ``usage``, the calls a provider batch answered (economy lane)
    children_usage: Usage | None = None  # its ended children's (with theirs): the budget counts it too
    final_message: Message | None = None
    finish_reason: str | None = None  # of the last model reply
    last_error: RunError | None = None
    node_since_ms: int = 0  # when the run entered its current node (time per state, from event times)
    final_call: str | None = None  # the loop limit reached: the model is asked, without tools, for its answer
    repairs: int = 0  # repair turns asked for answers that did not match responseFormat
    output: Any = None  # the final answer parsed, when responseFormat asked for JSON and it validated
    called_llm_at_ms: int = 0  # when the latest model call started (design: calledLlmAt), from event times
    round_called_at_ms: int = 0  # when the model made the current round's calls (their calledAt)

    @property
    def node(self) -> str:
        return _NODES[(self.phase, self.call)]

    @property
    def terminal(self) -> bool:
        return self.phase in TERMINAL_PHASES

    @property
    def cfg(self) -> RunConfig:
        if self.config is None:
            raise MachineError("the run has no configuration yet")
        return self.config


# The nodes of the table: a phase, or inside model_running the model-call loop's phase.
CALLING = f"{Phase.MODEL_RUNNING}.{CallPhase.CALLING}"
STREAMING = f"{Phase.MODEL_RUNNING}.{CallPhase.STREAMING}"
RETRYING = f"{Phase.MODEL_RUNNING}.{CallPhase.RETRYING}"


_BLANK = RunState(run_id="")  # the defaults, validated once
# the defaults that are containers: each state gets its own (the rest, immutable, are shared)
_FRESH = tuple(
    (name, f.default_factory)
    for name, f in RunState.model_fields.items()
    if f.default_factory is not None and isinstance(_BLANK.__dict__[name], list | dict)
)


def initial_state(run_id: str, session_id: str | None = None) -> RunState:
    """``RunState(run_id=run_id, session_id=session_id)`` without validating its some forty
    defaults again on every run (a quarter of what the run's start costs the machine)."""
    fresh = {name: make() for name, make in _FRESH}  # type: ignore[call-arg]
    new = copied(_BLANK, run_id=run_id, session_id=session_id, **fresh)
    object.__setattr__(new, "__pydantic_fields_set__", {"run_id", "session_id"})  # as validating sets it
    return new


# The fields whose default is no None: a checkpoint leaves a field out when it holds its default
# (``at_defaults``) or None (its dump's exclude_none: every field of the state and of the models in
# it that may be None defaults to None), and loading puts the default back. Checked once a commit,
# so cheaply: a falsy default (0, False, an empty list or dict) by the value's truth (validation
# fixes its type), an enum by identity, a model by its fields.
_FALSY = tuple(n for n, v in _BLANK.__dict__.items() if n != "run_id" and v is not None and not v)
_OTHERS = tuple(
    (n, v)
    for n, v in _BLANK.__dict__.items()
    if n != "run_id" and v is not None and v and not isinstance(v, Model)
)
_MODELS = tuple((n, v.__dict__) for n, v in _BLANK.__dict__.items() if isinstance(v, Model))


_FALSY_OF = itemgetter(*_FALSY)


def at_defaults(s: RunState) -> set[str]:
    """The fields of ``s`` that hold their defaults (the falsy ones picked in C: a Python loop over
    them cost as much as the checkpoint's serialisation saved)."""
    d = s.__dict__
    out = set(compress(_FALSY, map(not_, _FALSY_OF(d))))
    for n, v in _OTHERS:
        if d[n] is v:  # enum members: one object each
            out.add(n)
    for n, fields in _MODELS:
        if d[n].__dict__ == fields:
            out.add(n)
    return out
