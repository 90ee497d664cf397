"""A run as the producer reads it (Producer.get): its record, and its view in the API."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import orjson

from agentmill_client import limits
from agentmill_client.codec import to_jsonable
from agentmill_client.models import RunResult, RunStatus, Usage
from shared.fields import RunField
from shared.replies import text

__all__ = ["LINEAGE_KEYS", "RUN_FIELDS", "RunRecord", "fields_of", "lineage_view", "usage_of"]

LINEAGE_KEYS = ("retryOf", "forkOf", "atSeq")

F = RunField
# The run hash's fields a record is read from (Producer.get, Producer.wait): one HMGET.
RUN_FIELDS = [F.STATUS, F.TENANT, F.SESSION_ID, F.CREATED_AT, F.LAST_SEQ, F.RESULT, F.APPROVALS, F.ABORT,
               F.CLIENT_PENDING, F.CLIENT_SESSION, F.LINEAGE, F.RETRIED_BY, F.PARENT_RUN, F.PARENT_CALL,
               F.CHILDREN, F.PRIORITY, F.RUN_AT, F.USAGE_IN, F.USAGE_OUT, F.USAGE_ESTIMATED, F.USAGE_COST, F.USAGE_CACHE_READ, F.USAGE_CACHE_WRITE, F.ARCHIVED, F.AGENT,
               F.AGENT_VERSION, F.WAITING_FOR, F.MODEL_WAIT]  # fmt: skip


def fields_of(vals: Sequence[Any]) -> dict[RunField, str | None]:
    """A run hash's RUN_FIELDS as HMGET answered them, as text."""
    return dict(zip(RUN_FIELDS, (text(v) if v is not None else None for v in vals), strict=True))


def lineage_view(lineage: str, retried_by: str) -> dict[str, Any]:
    """A run's lineage as the API shows it (RunView, RunSummary): retryOf, or forkOf and atSeq; and
    retriedBy, the retry that took its place in its batch. From the run hash's fields."""
    d: dict[str, Any] = (
        {k: v for k, v in orjson.loads(lineage).items() if k in LINEAGE_KEYS} if lineage else {}
    )
    if retried_by:
        d["retriedBy"] = retried_by
    return d


def usage_of(h: Mapping[RunField, str | None]) -> Usage | None:
    """The run's usage so far from its hash's usage fields (commit.lua), None before its first commit."""
    if not h.get(RunField.USAGE_IN):
        return None
    cost = h.get(RunField.USAGE_COST)
    return Usage(
        input_tokens=int(h[RunField.USAGE_IN] or 0),
        output_tokens=int(h.get(RunField.USAGE_OUT) or 0),
        estimated=h.get(RunField.USAGE_ESTIMATED) == "1",
        cost_usd=float(cost) if cost else None,
        cache_read_tokens=int(h.get(RunField.USAGE_CACHE_READ) or 0),
        cache_write_tokens=int(h.get(RunField.USAGE_CACHE_WRITE) or 0),
    )


@dataclass(frozen=True, slots=True)
class RunRecord:
    run_id: str
    status: RunStatus
    tenant: str
    session_id: str | None
    created_at_ms: int
    last_seq: int
    result: RunResult | None
    pending_approvals: list[dict[str, Any]] = field(default_factory=list)
    abort_requested: bool = False
    pending_tool_calls: list[dict[str, Any]] = field(default_factory=list)
    key_id: str = ""  # the id its keys use, when not run_id (its tenant's key of it, submission.Scope)
    stream_key: str = ""  # the Redis stream of its events (``redis-cli XREAD … STREAMS <it> 0`` tails it)
    client_session: str = ""  # the id its client knows its session by, when not session_id
    parent_run_id: str = ""  # a child run's (sub-agent's) parent, and the parent's call it answers
    parent_tool_call_id: str = ""
    had_children: bool = False  # it started child runs (its run hash has the children field)
    lineage: dict[str, Any] = field(default_factory=dict)  # retryOf | forkOf, atSeq; retriedBy (lineage_view)
    priority: int = limits.DEFAULT_PRIORITY  # as capped by its tenant's quota (this when it named none)
    run_at_ms: int | None = None  # when it was asked to start; status scheduled until then
    usage: Usage | None = None  # so far (the run hash's usage fields); an ended run's equals result.usage
    archived: bool = False  # in the archive: its events are read from there (producer.archived)
    agent: str = ""  # its agent (profile) name
    agent_version: int | None = None  # the version of its tenant's agent it is pinned to
    # why a queued run is not on the queue yet ('concurrency:<key>') or a scheduled run was delayed
    # ('rate:<key>'), '' = neither
    waiting_for: str = ""
    economy_wait: dict[str, Any] | None = None  # awaiting_model: its call's batch (producer/economy_view.py)

    @property
    def key(self) -> str:
        return self.key_id or self.run_id

    def as_seen_by(self, client_id: str) -> RunRecord:
        """The record under the id its tenant knows it by."""
        return self if client_id == self.run_id else replace(self, run_id=client_id, key_id=self.key)

    def view(self) -> dict[str, Any]:
        session = self.client_session or self.session_id
        d: dict[str, Any] = {
            "runId": self.run_id,
            "status": self.status.value,
            "sessionId": session,
            "createdAt": self.created_at_ms,
            "lastSeq": self.last_seq,
            "streamKey": self.stream_key,
            "priority": self.priority,
        }
        if self.agent:
            d["agent"] = self.agent
        if self.agent_version is not None:
            d["agentVersion"] = self.agent_version
        if self.run_at_ms is not None:
            d["runAt"] = self.run_at_ms
        if self.waiting_for and self.status in (RunStatus.QUEUED, RunStatus.SCHEDULED):
            d["waitingFor"] = self.waiting_for
        usage = self.usage or (self.result.usage if self.result is not None else None)
        if usage is not None:
            d["usage"] = to_jsonable(usage)
        if self.result is not None:
            d["result"] = to_jsonable(self.result)
            d["result"]["runId"] = self.run_id
            if d["result"].get("sessionId"):
                d["result"]["sessionId"] = session
        if self.pending_approvals:
            d["pendingApprovals"] = self.pending_approvals
        if self.pending_tool_calls:
            d["pendingToolCalls"] = self.pending_tool_calls
        if self.economy_wait is not None:
            d["economyWait"] = self.economy_wait
        if self.parent_run_id:
            d["parentRunId"] = self.parent_run_id
            d["parentToolCallId"] = self.parent_tool_call_id
        d.update(self.lineage)
        return d
