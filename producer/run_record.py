"""A run as the producer reads it (Producer.get): its record, and its view in the API."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from agentmill_client.codec import to_jsonable
from agentmill_client.models import RunResult, RunStatus

__all__ = ["RunRecord"]


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
    archived: bool = False  # in the archive: its events are read from there (producer.archived)

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
        }
        if self.result is not None:
            d["result"] = to_jsonable(self.result)
            d["result"]["runId"] = self.run_id
            if d["result"].get("sessionId"):
                d["result"]["sessionId"] = session
        if self.pending_approvals:
            d["pendingApprovals"] = self.pending_approvals
        if self.pending_tool_calls:
            d["pendingToolCalls"] = self.pending_tool_calls
        return d
