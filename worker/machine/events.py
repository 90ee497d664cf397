"""The machine's input: what happened (past-tense nouns). Every event carries the time it happened,
and any randomness (retry jitter) arrives as a field, so a recorded sequence replays to the same states."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agentmill_client.models import Message, ToolResult, Usage
from shared.construct import with_written_init
from worker.core.config import RunConfig
from worker.core.policy import ModelFailure
from worker.machine.state import RunState

__all__ = [
    "AbortRequested",
    "ApprovalsDecided",
    "BudgetRefused",
    "ChildrenEnded",
    "ChildrenStarted",
    "ClientResultsReceived",
    "CompactionDone",
    "ContextLoaded",
    "DeadlineReached",
    "EffectCrashed",
    "Event",
    "ModelDeferred",
    "ModelFailed",
    "ModelReplied",
    "ModelStreamOpened",
    "Restored",
    "Resumed",
    "RetryTimerFired",
    "StartRejected",
    "Started",
    "ToolFinished",
]


@with_written_init
@dataclass(frozen=True, slots=True)
class Started:
    now_ms: int
    config: RunConfig
    input_messages: list[Message]


@with_written_init
@dataclass(frozen=True, slots=True)
class Restored:
    """A new run that continues another's (a retry or a fork: worker/machine/restore.py).
    ``origin``: that run's state, from its last checkpoint (a retry) or rebuilt from its events up to
    a seq (a fork); None: it had none worth resuming (it never started), so the run starts from
    ``input_messages``. ``recorded``: the tool results copied with it (served, never executed again);
    ``append``: messages a fork adds; ``lineage``: what the first status event says about the origin
    (``retryOf`` or ``forkOf`` and ``atSeq``)."""

    now_ms: int
    config: RunConfig
    origin: RunState | None
    input_messages: list[Message]
    append: list[Message] = field(default_factory=list)
    recorded: dict[str, ToolResult] = field(default_factory=dict)
    lineage: dict[str, Any] = field(default_factory=dict)


@with_written_init
@dataclass(frozen=True, slots=True)
class ContextLoaded:
    now_ms: int
    history: list[Message]


@with_written_init
@dataclass(frozen=True, slots=True)
class Resumed:
    """A new job took the run over from its checkpoint. ``recorded``: tool results the store holds
    (recorded by a worker that stopped before its step was committed): served, never executed again."""

    now_ms: int
    recorded: dict[str, ToolResult] = field(default_factory=dict)


@with_written_init
@dataclass(frozen=True, slots=True)
class ModelStreamOpened:
    now_ms: int


@with_written_init
@dataclass(frozen=True, slots=True)
class ModelReplied:
    """The stream ended; ``finish_reason`` is what it said (None: it stopped without saying)."""

    now_ms: int
    message: Message
    usage: Usage | None = None
    finish_reason: str | None = "stop"
    jitter: float = 0.5  # for the retry of a reply that turns out cut off
    partial: bool = False  # deltas of this attempt were already published


@with_written_init
@dataclass(frozen=True, slots=True)
class ModelFailed:
    now_ms: int
    failure: ModelFailure
    jitter: float = 0.5  # uniform in [0, 1), drawn by the runner
    partial: bool = False  # deltas of this attempt were already published


@with_written_init
@dataclass(frozen=True, slots=True)
class RetryTimerFired:
    now_ms: int


@with_written_init
@dataclass(frozen=True, slots=True)
class ToolFinished:
    now_ms: int
    result: ToolResult


@with_written_init
@dataclass(frozen=True, slots=True)
class ApprovalsDecided:
    now_ms: int
    decisions: dict[str, bool]
    reasons: dict[str, str] = field(default_factory=dict)
    actors: dict[str, dict[str, Any]] = field(default_factory=dict)  # who decided each (shared.actors)


@with_written_init
@dataclass(frozen=True, slots=True)
class ModelDeferred:
    """The economy lane: the model call was written as one request of a provider batch
    (``custom_id``); its answer comes back when the batch is done, to whichever worker resumes the run."""

    now_ms: int
    custom_id: str
    switch_at_ms: int | None  # when it goes to the standard lane if the batch has not answered
    endpoint: str = ""  # the provider endpoint's hash (endpoint_keys.endpoint_hash): where its batch is


@with_written_init
@dataclass(frozen=True, slots=True)
class ClientResultsReceived:
    """Results of client tool calls the caller posted (the store holds them; a call past its
    deadline carries a timeout error written by the store)."""

    now_ms: int
    results: dict[str, ToolResult]
    actors: dict[str, dict[str, Any]] = field(default_factory=dict)  # who sent each (shared.actors)


@with_written_init
@dataclass(frozen=True, slots=True)
class ChildrenStarted:
    """The child runs of sub-agent calls exist (``streams``: toolCallId -> the child's stream key),
    or could not be created (``failed``: toolCallId -> why)."""

    now_ms: int
    streams: dict[str, str]
    failed: dict[str, str] = field(default_factory=dict)


@with_written_init
@dataclass(frozen=True, slots=True)
class ChildrenEnded:
    """Results of sub-agent calls whose child runs ended (delivered to the parent's tools hash), and
    what each child spent (``usage``: toolCallId -> the child's usage, its own children's included)."""

    now_ms: int
    results: dict[str, ToolResult]
    usage: dict[str, Usage] = field(default_factory=dict)


@with_written_init
@dataclass(frozen=True, slots=True)
class CompactionDone:
    now_ms: int
    transcript: list[Message]
    removed: int
    reason: str


@with_written_init
@dataclass(frozen=True, slots=True)
class AbortRequested:
    now_ms: int
    reason: str = "aborted by request"
    actor: dict[str, Any] | None = None  # who aborts (shared.actors), named in the status event


@with_written_init
@dataclass(frozen=True, slots=True)
class BudgetRefused:
    """The tenant's budget for the day cannot afford the model call about to start (nothing was
    sent to the provider): the message carries the figures."""

    now_ms: int
    message: str


@with_written_init
@dataclass(frozen=True, slots=True)
class DeadlineReached:
    now_ms: int


@with_written_init
@dataclass(frozen=True, slots=True)
class StartRejected:
    """The run cannot start: its profile or policy does not resolve to a configuration."""

    now_ms: int
    code: str
    message: str


@with_written_init
@dataclass(frozen=True, slots=True)
class EffectCrashed:
    """An effect raised what it should not (a bug, corrupt data): the run fails with it, never hangs."""

    now_ms: int
    message: str


Event = (
    Started
    | Restored
    | ContextLoaded
    | Resumed
    | ModelStreamOpened
    | ModelReplied
    | ModelDeferred
    | ModelFailed
    | RetryTimerFired
    | ToolFinished
    | ApprovalsDecided
    | ClientResultsReceived
    | ChildrenStarted
    | ChildrenEnded
    | CompactionDone
    | AbortRequested
    | BudgetRefused
    | DeadlineReached
    | StartRejected
    | EffectCrashed
)
