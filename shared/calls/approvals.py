"""A human's decision on a tool call that waits for approval (POST /v1/runs/{id}/approvals)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from shared.calls.base import ScriptCall
from shared.keys import Partition

__all__ = ["SettleApproval", "SettleApprovalVerdict"]


class SettleApprovalVerdict(StrEnum):
    UNKNOWN_RUN = "unknown_run"  # no such run (or another tenant's)
    NOT_AWAITING = "not_awaiting"  # it waits for no approval (its status second)
    UNKNOWN_CALL = "unknown_call"
    ALREADY_DECIDED = "already_decided"  # (the decision second)
    RECORDED = "recorded"  # (how many calls still wait second)
    RESUMED = "resumed"  # the last decision: the run is back on the queue


@dataclass(frozen=True, slots=True)
class SettleApproval(ScriptCall):
    """settle_approval.lua: record one decision (with who decided) in the run's approvals; the last
    one puts the run back on the queue as its next dispatch (the script reads the run's own)."""

    SCRIPT = "settle_approval"
    KEY_NAMES = ("run", "stream", "tools", "answer_workers")  # the last: prelude.lua answer_event
    VERDICT = SettleApprovalVerdict

    run_id: str
    tool_call_id: str
    decision: str  # approved | rejected
    reason: str  # '' = none
    tenant: str  # '' = any
    actor: str  # who decided: its JSON (shared.actors.actor_json), '' = none
    sealed: str  # '1': payloads are sealed at rest (AGENTMILL_DATA_KEYS), '' = not

    def keys(self, part: Partition) -> list[str]:
        return [*part.run_keys(self.run_id), part.answer_workers]
