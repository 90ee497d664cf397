"""What a run gives back (seed: agentloop-runinput-runevent-design): its result, with its error and
usage, and the events of its stream."""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import Field

from agentmill_client.base import Model
from agentmill_client.messages import Message
from agentmill_client.statuses import TERMINAL, RunStatus

__all__ = ["BatchUsage", "EventKind", "LaneUsage", "RunError", "RunEvent", "RunResult", "Usage"]


class RunError(Model):
    code: str
    message: str
    retryable: bool = False


class Usage(Model):
    """Tokens of one model call or a sum of them. ``inputTokens`` counts the whole prompt, its
    cached parts included: ``cacheReadTokens`` (read from the provider's prompt cache) and
    ``cacheWriteTokens`` (written to it) are parts of it, so input ≥ cache reads + cache writes.
    ``estimated``: some call's provider reported no usage and its tokens are agentmill's estimate.
    ``costUsd``: the tokens at the model's prices, cache reads and writes at theirs (the profile's
    pricing, else the price table's; None when the model has no price)."""

    input_tokens: int = 0
    output_tokens: int = 0
    estimated: bool = False
    cost_usd: float | None = None
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    lane: Literal["economy"] | None = None  # one call's: "economy" when a provider batch answered it

    def __add__(self, other: Usage) -> Usage:
        costs = [c for c in (self.cost_usd, other.cost_usd) if c is not None]
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            estimated=self.estimated or other.estimated,
            cost_usd=round(sum(costs), 9) if costs else None,
            cache_read_tokens=self.cache_read_tokens + other.cache_read_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
        )


class LaneUsage(Model):
    """One lane's share of a batch's usage totals (``costUsd`` None when no run had a price)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = None
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0


class BatchUsage(Usage):
    """A batch's ended runs' usage summed, and ``lanes``: the economy lane's share (the model calls a
    provider batch answered) and the standard lane's (the rest), which add up to the totals."""

    lanes: dict[Literal["standard", "economy"], LaneUsage] = Field(default_factory=dict)


class RunResult(Model):
    session_id: str | None = None
    run_id: str
    status: RunStatus
    final_assistant_message: Message | None = None
    last_error: RunError | None = None
    usage: Usage | None = None  # the run's own model calls (its child runs' are not in it)
    # What its child runs (sub-agents) spent, their own children included; None: it started none that ended.
    # The parent's budget counts usage + childrenUsage; each run's bill (usage) is counted once.
    children_usage: Usage | None = None
    iterations: int = 0
    stop_reason: str | None = None  # the limit a completed run stopped at: max_iterations | max_tool_rounds
    # The last model reply's finish_reason: "stop"; "length" when the answer hit maxTokens (the run
    # completes with that answer, marked so); "content_filter" on a run failed by the provider's filter.
    finish_reason: str | None = None
    output: Any = None  # a completed structured-output run's answer, parsed (responseFormat)
    # includeMessages: the run's final transcript, its newest messages within limits.MAX_RESULT_MESSAGES
    # and MAX_RESULT_MESSAGES_BYTES; messagesOmitted: how many older ones were left out.
    messages: list[Message] | None = None
    messages_omitted: int | None = None
    # The run stored no content (RunInput.storeContent false): its answer, output and messages are gone.
    content_redacted: bool | None = None


class EventKind(StrEnum):
    STATUS = "status"
    MODEL_DELTA = "model_delta"
    ASSISTANT_MESSAGE = "assistant_message"
    TOOL_CALL = "tool_call"
    TOOL_RESULT = "tool_result"
    ERROR = "error"
    COMPACTION = "compaction"
    USAGE = "usage"  # after each model reply: that call's usage and the run's total so far
    CHILD_STARTED = "child_started"  # a sub-agent call's child run was created (its id and streamKey)
    CHILD_ENDED = "child_ended"  # the parent took a child run's ending as that call's result
    APPROVAL = "approval"  # a human's decision on a call awaiting approval (with who decided: actor)


class RunEvent(Model):
    """One entry of a run's stream. `seq` runs 1, 2, 3 … with no gap and no repeat."""

    run_id: str
    seq: int = Field(ge=1)
    kind: EventKind
    payload: dict[str, Any]
    ts: int  # unix milliseconds

    @property
    def terminal(self) -> bool:
        return self.kind == EventKind.STATUS and self.payload.get("status") in TERMINAL
