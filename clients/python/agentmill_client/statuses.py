"""A run's status, and the one place the sets of terminal and active statuses live."""

from __future__ import annotations

from enum import StrEnum

__all__ = ["ACTIVE", "TERMINAL", "RunStatus"]


class RunStatus(StrEnum):
    SCHEDULED = "scheduled"  # submitted with a runAt still ahead: queued once it is due
    QUEUED = "queued"
    RUNNING = "running"
    AWAITING_HUMAN = "awaiting_human"
    AWAITING_TOOLS = "awaiting_tools"  # waiting for results of client tool calls, on no worker
    AWAITING_CHILDREN = "awaiting_children"  # waiting for its child runs (sub-agents) to end, on no worker
    AWAITING_MODEL = "awaiting_model"  # economy lane: its model call is in a provider batch, on no worker
    COMPLETED = "completed"
    FAILED = "failed"
    ABORTED = "aborted"
    SUPERSEDED = "superseded"  # replaced, before it started, by a later run of its debounce key

    @property
    def terminal(self) -> bool:
        return self in TERMINAL


# A StrEnum member equals (and hashes as) its value, so ``"failed" in TERMINAL`` holds as well.
TERMINAL = frozenset({RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.ABORTED, RunStatus.SUPERSEDED})
ACTIVE = frozenset(RunStatus) - TERMINAL
