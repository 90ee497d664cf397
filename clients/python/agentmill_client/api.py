"""The HTTP API's answers, shared by the API (which documents them in OpenAPI) and the Python
client (which returns them). Attributes are snake_case, the JSON camelCase (base.Answer).

The operators' pool view is in pool.py, a tenant's usage in usage.py; their names stay importable
from here, as the client's public surface.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from agentmill_client import limits
from agentmill_client.base import Answer
from agentmill_client.inputs import ClientToolResult
from agentmill_client.messages import Message
from agentmill_client.outputs import BatchUsage, RunEvent, RunResult, Usage
from agentmill_client.pool import PoolAnswer, PoolMinute, PoolPartition, PoolWorker
from agentmill_client.usage import UsageAnswer, UsageDay, UsageTotals

__all__ = [
    "AbortAnswer",
    "Accepted",
    "ApprovalVerdict",
    "ApprovalsAnswer",
    "BatchAbortAnswer",
    "BatchAnswer",
    "BatchItem",
    "BatchResultLine",
    "BatchRetryAnswer",
    "BatchRetryItem",
    "BatchView",
    "ChildRun",
    "DeletionBody",
    "DeletionView",
    "ErrorBody",
    "EventsPage",
    "ForkBody",
    "PoolAnswer",
    "PoolMinute",
    "PoolPartition",
    "PoolWorker",
    "ResultError",
    "RetryBody",
    "RunDeleted",
    "RunSummary",
    "RunView",
    "RunsPage",
    "SessionDeleted",
    "SessionView",
    "ToolResultVerdict",
    "ToolResultsAnswer",
    "ToolResultsBody",
    "UsageAnswer",
    "UsageDay",
    "UsageTotals",
]


class ErrorBody(Answer):
    code: str
    message: str
    field: str | None = None


class Accepted(Answer):
    run_id: str  # wire names are camelCase
    status: str
    events_url: str


class BatchItem(Answer):
    run_id: str | None = None
    status: str | None = None
    error: ErrorBody | None = None


class BatchAnswer(Answer):
    results: list[BatchItem]
    batch_id: str | None = None  # GET /v1/batches/{batchId} follows it


class RunSummary(Answer):
    """One row of a run listing."""

    run_id: str
    status: str
    created_at: int
    agent: str = ""
    session_id: str | None = None
    batch_id: str | None = None
    finished_at: int | None = None
    iterations: int | None = Field(
        default=None, description="model replies so far (its result's, once ended)"
    )
    error_code: str | None = Field(
        default=None, description="a failed, aborted or superseded run's lastError.code"
    )
    retry_of: str | None = Field(
        default=None, description="the run this one retries (POST /v1/runs/{id}/retry)"
    )
    fork_of: str | None = Field(default=None, description="the run this one was forked from (POST …/fork)")
    at_seq: int | None = Field(
        default=None, description="a fork's: the seq of forkOf's events it starts from"
    )
    retried_by: str | None = Field(
        default=None,
        description="the retry that took this run's place in its batch (counts and results show it)",
    )
    priority: int = Field(
        default=limits.DEFAULT_PRIORITY,
        description="its priority (0-9, higher first), as capped by its tenant's quota",
    )
    run_at: int | None = Field(default=None, description="when it was asked to start (epoch ms), if it was")


class RunsPage(Answer):
    runs: list[RunSummary]
    next: str | None = Field(default=None, description="cursor of the next page; null at the end")


class BatchView(Answer):
    batch_id: str
    total: int = Field(description="runs created in the batch")
    counts: dict[str, int] = Field(description="runs per status, kept by the scripts that change statuses")
    done: int = Field(description="runs that have ended (completed, failed, aborted or superseded)")
    progress: float = Field(description="done / total")
    created_at: int
    finished_at: int | None = Field(default=None, description="when its last run ended")
    finished: bool
    usage: BatchUsage = Field(
        default_factory=BatchUsage,
        description="its ended runs' usage summed (added as each run ends): tokens, costUsd (None when no"
        " run had a price), estimated (some run's usage is an estimate), lanes (the totals split by lane)",
    )


class ResultError(Answer):
    code: str
    message: str


class BatchResultLine(Answer):
    """One line of ``GET /v1/batches/{id}/results``: a run of the batch, in item order."""

    run_id: str
    index: int = Field(description="the run's item index in the batch (offset + its place in its part)")
    status: str = Field(description="queued, running, … while it has not ended: then no result fields")
    output: Any = Field(default=None, description="its structured output, when the run has one")
    text: str | None = Field(default=None, description="the final assistant message (when no output)")
    usage: dict[str, Any] | None = Field(default=None, description="the run's token counts")
    last_error: ResultError | None = Field(default=None, description="why it failed (or was aborted)")


class BatchAbortAnswer(Answer):
    batch_id: str
    aborted: int = Field(description="runs that were queued or awaiting approval, now aborted")
    requested: int = Field(description="running runs whose workers stop them")
    finished: int = Field(description="runs that had ended meanwhile")


class ChildRun(Answer):
    run_id: str
    status: str
    parent_tool_call_id: str = Field(description="the parent's tool call the child answers")


class RunView(Answer):
    run_id: str
    status: str
    session_id: str | None = None
    created_at: int
    agent: str | None = Field(default=None, description="its agent (profile)")
    agent_version: int | None = Field(
        default=None, description="the version of its tenant's agent (POST /v1/agents) it is pinned to"
    )
    input_messages: list[dict[str, Any]] | None = Field(
        default=None,
        description="with include=input: the messages it was submitted with, as sent (absent once "
        "archiving dropped its input from Redis)",
    )
    last_seq: int
    priority: int = Field(
        default=limits.DEFAULT_PRIORITY,
        description="its priority (0-9, higher first), as capped by its tenant's quota",
    )
    run_at: int | None = Field(
        default=None, description="when it was asked to start (epoch ms); status scheduled until then"
    )
    waiting_for: str | None = Field(
        default=None,
        description="while queued, why it is not on the queue yet: `concurrency:<key>` waits for a slot "
        "of its concurrency key; while scheduled, `rate:<key>`: its rate key delayed it to its runAt",
    )
    result: RunResult | None = None
    usage: Usage | None = Field(
        default=None, description="its usage so far, while it runs too (after an ending: result.usage)"
    )
    pending_approvals: list[dict[str, Any]] | None = None
    pending_tool_calls: list[dict[str, Any]] | None = None
    lane: Literal["standard", "economy"] | None = Field(
        default=None, description="with include=input: the lane it was submitted in (RunInput.lane)"
    )
    economy_wait: dict[str, Any] | None = Field(
        default=None,
        description="awaiting_model: its model call's customId, switchAt (when it goes to the standard "
        "lane) and the provider batch it is in: batchState open, closed, creating, submitted (with "
        "providerBatchId) or delivered",
    )
    stream_key: str | None = Field(
        default=None,
        description="the Redis stream of the run's events (XREAD it to tail them; redis-cli -c on a cluster)",
    )
    parent_run_id: str | None = Field(default=None, description="a child run's (sub-agent's) parent run")
    parent_tool_call_id: str | None = Field(default=None, description="the parent's tool call it answers")
    children: list[ChildRun] | None = Field(
        default=None, description="the child runs (sub-agents) it started, oldest first, with their status"
    )
    retry_of: str | None = Field(
        default=None, description="the run this one retries (POST /v1/runs/{id}/retry)"
    )
    fork_of: str | None = Field(default=None, description="the run this one was forked from (POST …/fork)")
    at_seq: int | None = Field(
        default=None, description="a fork's: the seq of forkOf's events it starts from"
    )
    retried_by: str | None = Field(
        default=None,
        description="the retry that took this run's place in its batch (counts and results show it)",
    )


class EventsPage(Answer):
    events: list[RunEvent]
    next: int


class AbortAnswer(Answer):
    run_id: str
    result: str = Field(
        description="aborted (was queued or awaiting approval) | requested (its worker stops it) | finished (no-op)"
    )


class RunDeleted(Answer):
    run_id: str
    deleted_at: int = Field(description="ms since the epoch: when it was deleted")
    runs_deleted: int = Field(
        description="runs deleted by this call, its sub-agents' included (0: deleted before)"
    )
    already_deleted: bool = Field(
        default=False, description="it was deleted before: its tombstone answers (while it is kept)"
    )
    archive_pending: bool = Field(
        default=False,
        description="its archive rows were held by another transaction (an archiver's write) past the "
        "bounded wait: the workers delete them in the background; the run is deleted everywhere else",
    )


class SessionDeleted(Answer):
    session_id: str
    runs_deleted: int


class DeletionBody(Answer):
    metadata: dict[str, str | int | float | bool] = Field(
        min_length=1,
        max_length=limits.MAX_META_TERMS,
        description="every run of the tenant whose metadata has all of these values is deleted",
    )


class DeletionView(Answer):
    deletion_id: str
    state: Literal["pending", "running", "done"]
    metadata: dict[str, Any]
    matched: int = Field(description="runs found matching so far (those deleted, and those still left)")
    deleted: int
    created_at: int
    finished_at: int | None = None


class ApprovalVerdict(Answer):
    tool_call_id: str
    result: str


class ApprovalsAnswer(Answer):
    run_id: str
    results: list[ApprovalVerdict]
    resumed: bool


class RetryBody(Answer):
    from_: Literal["checkpoint", "start"] = Field(
        default="checkpoint",
        alias="from",
        description="checkpoint: resume from the run's last checkpoint, its recorded tool results reused; "
        "start: a fresh run of the same input",
    )


class ForkBody(Answer):
    at_seq: int = Field(
        ge=0,
        le=2**53 - 1,  # a seq is a stream id's first part: past this, Redis refuses the range (was a 500)
        description="the seq of the run's event whose state the fork starts from (0: its input)",
    )
    input_messages: list[Message] | None = Field(
        default=None, max_length=256, description="messages appended before the fork's next model call"
    )
    agent: str | None = Field(
        default=None,
        min_length=1,
        max_length=128,
        description="another agent for the fork (`name` or `name@n`); unset: the run's own, its version kept",
    )


class BatchRetryItem(Answer):
    run_id: str = Field(description="the run retried")
    retry_run_id: str | None = Field(default=None, description="its retry, in its place in the batch")
    error: ErrorBody | None = None


class BatchRetryAnswer(Answer):
    batch_id: str
    results: list[BatchRetryItem]


class ToolResultsBody(Answer):
    results: list[ClientToolResult] = Field(min_length=1, max_length=256)


class ToolResultVerdict(Answer):
    tool_call_id: str
    result: str = Field(description="recorded | duplicate (the same result was recorded before: a no-op)")


class ToolResultsAnswer(Answer):
    run_id: str
    results: list[ToolResultVerdict]
    resumed: bool = Field(
        description="every pending client call has its result: the run is back on the queue"
    )


class SessionView(Answer):
    session_id: str
    created_at: int
    active_run: str | None = None
    runs: list[str] = Field(description="its newest runs (at most 1,000), in submission order")
    history: list[dict[str, Any]]


class CallerView(Answer):
    """``GET /v1/me``: who the caller's token is, so a page can show what it may open."""

    tenant: str
    operator: bool = Field(
        description="an operator tenant (AGENTMILL_OPERATOR_TENANTS): it may read GET /v1/pool"
    )
    scopes: list[str] = Field(default_factory=list, description="what its token may do (read, submit, …)")
    actor: str = Field(default="", description="its API key's id, or token-file: how the audit log names it")
