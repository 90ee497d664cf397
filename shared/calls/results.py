"""Calls that deliver results to a parked run: a client's tool results, a child's ending; and the
reads of a batch's results and the webhooks' claims (producer)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from shared.calls.base import ScriptCall
from shared.keys import Partition

__all__ = [
    "BatchResults",
    "ChildResult",
    "ChildResultVerdict",
    "ClaimWebhooks",
    "ToolResults",
    "ToolResultsVerdict",
]


class ChildResultVerdict(StrEnum):
    MISSING = "missing"  # no parent run
    FINISHED = "finished"  # the parent had ended (its status second)
    DUPLICATE = "duplicate"  # this child's result was recorded before
    RECORDED = "recorded"
    RESUMED = "resumed"  # recorded, and the parent's last open child: back on the queue


@dataclass(frozen=True, slots=True)
class ChildResult(ScriptCall):
    """child_result.lua: a child run's ending delivered to its parent (on the parent's partition):
    the record of the call that started it, once."""

    SCRIPT = "child_result"
    KEY_NAMES = ("parent", "parent_tools")
    VERDICT = ChildResultVerdict

    parent_run_id: str
    tool_call_id: str
    child_run_id: str
    record: bytes | str  # the call's record JSON (state done)

    def keys(self, part: Partition) -> list[str]:
        return [part.run(self.parent_run_id), part.tools(self.parent_run_id)]


class ToolResultsVerdict(StrEnum):
    RECORDED = "recorded"  # then per result: recorded | duplicate
    RESUMED = "resumed"  # recorded, and the run went back on the queue
    UNKNOWN_RUN = "unknown_run"
    FINISHED = "finished"  # (its status second)
    UNKNOWN_CALL = "unknown_call"  # (the call second, as for the ones below)
    NOT_CLIENT = "not_client"
    CONFLICT = "conflict"
    TIMED_OUT = "timed_out"
    DUPLICATE = "duplicate"  # (a result's own verdict)


@dataclass(frozen=True, slots=True)
class ToolResults(ScriptCall):
    """tool_results.lua: a caller's results for client tool calls, all or none. ``results``:
    toolCallId, content, isError ('1' | '') per result."""

    SCRIPT = "tool_results"
    KEY_NAMES = ("run", "stream", "tools", "answer_workers")  # the last: prelude.lua answer_event
    VERDICT = ToolResultsVerdict

    run_id: str
    tenant: str  # '' = any
    actor: str  # who sent them: its JSON (shared.actors.actor_json), kept in each record; '' = none
    count: int
    results: tuple[str, ...]

    def keys(self, part: Partition) -> list[str]:
        return [*part.run_keys(self.run_id), part.answer_workers]


@dataclass(frozen=True, slots=True)
class ClaimWebhooks(ScriptCall):
    """claim_webhooks.lua: move newly finished runs into the due set, then claim up to ``limit`` due
    deliveries for ``lease_ms``; answers their run ids."""

    SCRIPT = "claim_webhooks"
    KEY_NAMES = ("due",)

    now: int
    lease_ms: int
    limit: int

    def keys(self, part: Partition) -> list[str]:
        return [part.webhooks_due]


@dataclass(frozen=True, slots=True)
class BatchResults(ScriptCall):
    """batch_results.lua: a page of a batch's runs with their results, in item order (read-only)."""

    SCRIPT = "batch_results"
    KEY_NAMES = ()  # the index is named by the arguments

    tenant: str
    batch_id: str
    start: int  # an item index
    after: str  # a runId at ``start`` the page begins after ('' = none)
    limit: int
    scan_max: int
    statuses: str  # a comma list ('' = every status)
    max_bytes: int

    def keys(self, part: Partition) -> list[str]:
        return []
