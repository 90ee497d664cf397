"""The machine's output: what to do next (imperatives). The runner executes them and feeds the outcomes
back as events."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentmill_client.models import Budget, EventKind, Message, ResponseFormat, RunResult, ToolCall
from shared.construct import with_written_init
from worker.core.config import ToolSpec
from worker.machine.state import RunState

__all__ = [
    "AwaitChildren",
    "AwaitClient",
    "AwaitHuman",
    "AwaitModel",
    "CallModel",
    "Command",
    "Compact",
    "Decision",
    "Emit",
    "ExecuteTool",
    "Finish",
    "LoadContext",
    "ModelRequest",
    "OfferClientCalls",
    "StartChildren",
    "Wait",
]


@with_written_init
@dataclass(frozen=True, slots=True)
class Emit:
    """Publish a RunEvent; the runner numbers it and commits it with the checkpoint."""

    kind: EventKind
    payload: dict[str, Any]


@with_written_init
@dataclass(frozen=True, slots=True)
class LoadContext:
    session_id: str | None


@with_written_init
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
    response_format: ResponseFormat | None = None  # asked of providers that support it natively
    reserve_tokens: int = (
        0  # a tenant's day budget holds it: policy.prompt_bound (an upper bound) + maxTokens
    )
    reserve_cost_usd: float | None = None  # and its cost by the model's pricing (None: no pricing)
    provider_index: int = 0  # the provider of the profile's fallback chain to call (0: the primary)


@with_written_init
@dataclass(frozen=True, slots=True)
class CallModel:
    request: ModelRequest


@with_written_init
@dataclass(frozen=True, slots=True)
class Wait:
    delay_ms: int


@with_written_init
@dataclass(frozen=True, slots=True)
class ExecuteTool:
    call: ToolCall


@with_written_init
@dataclass(frozen=True, slots=True)
class Compact:
    transcript: list[Message]
    keep_recent: int
    reason: str


@with_written_init
@dataclass(frozen=True, slots=True)
class AwaitHuman:
    pending: list[ToolCall]

    def record(self) -> dict[str, dict[str, Any]]:
        """The approvals the run hash keeps while it waits (the API shows them, humans settle them)."""
        return {c.id: {"decision": "pending", "name": c.name, "arguments": c.arguments} for c in self.pending}


@with_written_init
@dataclass(frozen=True, slots=True)
class OfferClientCalls:
    """Record these client calls as pending, with their deadlines, in the same commit."""

    calls: list[ToolCall]
    deadlines: dict[str, int]
    timeout_ms: int


@with_written_init
@dataclass(frozen=True, slots=True)
class AwaitClient:
    """Park the run until every pending client call has a result (or passed its deadline)."""

    pending: list[ToolCall]
    deadlines: dict[str, int]

    def record(self) -> list[dict[str, Any]]:
        """The pending client calls the run hash keeps while it waits (the caller answers them)."""
        return [
            {"toolCallId": c.id, "name": c.name, "arguments": c.arguments, "deadlineMs": self.deadlines[c.id]}
            for c in self.pending
        ]


@with_written_init
@dataclass(frozen=True, slots=True)
class StartChildren:
    """Create the child runs of these sub-agent calls (idempotent: the ids are derived from the
    parent's and the call's); the outcome comes back as ChildrenStarted."""

    calls: list[ToolCall]
    child_ids: dict[str, str]  # toolCallId -> child run id
    budget: Budget | None = None  # each child's: what the parent's budget has left (None: no budget)


@with_written_init
@dataclass(frozen=True, slots=True)
class AwaitChildren:
    """Park the run until every pending child has ended (its result delivered to the tools hash)."""

    pending: list[ToolCall]
    child_ids: dict[str, str]

    def record(self) -> list[dict[str, Any]]:
        """The children the run waits for, as the run hash keeps them (commit.lua settles on them)."""
        return [{"toolCallId": c.id, "name": c.name, "runId": self.child_ids[c.id]} for c in self.pending]


@with_written_init
@dataclass(frozen=True, slots=True)
class AwaitModel:
    """Park the run until the provider batch holding its model call answers (economy lane)."""

    custom_id: str
    model_call_index: int
    switch_at_ms: int | None
    endpoint: str = ""

    def record(self) -> dict[str, Any]:
        return {"customId": self.custom_id, "index": self.model_call_index, "switchAt": self.switch_at_ms,
                "endpoint": self.endpoint}  # fmt: skip


@with_written_init
@dataclass(frozen=True, slots=True)
class Finish:
    result: RunResult


Command = (
    Emit | LoadContext | CallModel | Wait | ExecuteTool | Compact | AwaitHuman | OfferClientCalls | AwaitClient
    | StartChildren | AwaitChildren | AwaitModel | Finish
)  # fmt: skip
Decision = tuple[RunState, list[Command]]
