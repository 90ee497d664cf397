"""Events published between checkpoints: what an effect reports while it runs.

A streaming model call and a retried tool call report progress before the machine hears their
outcome (deltas, restarts, capacity waits, retried attempts). They are not transitions, so no
handler emits them; these pure builders are still the only place their payloads are defined, so
every event a run publishes is built by the machine package. The runner stamps and publishes them.
"""

from __future__ import annotations

from typing import Any

from agentmill_client.models import EventKind, ToolCall
from worker.machine.commands import Emit, ModelRequest
from worker.machine.steps import error_event, status_event

__all__ = [
    "capacity_wait",
    "lane_changed",
    "mcp_tools_relisted",
    "model_call_restarted",
    "model_delta",
    "tool_attempt_failed",
    "tool_reexecuted",
]


def model_call_restarted(model_call_index: int, discard_after_seq: int) -> Emit:
    """Deltas past the checkpoint came from a call cut off by a crash: readers drop them."""
    return status_event(
        "model_call_restarted",
        modelCallIndex=model_call_index,
        discardAfterSeq=discard_after_seq,
        reason="the worker running this model call stopped; the call starts over",
    )


def mcp_tools_relisted(server: str, listing: str, now: str | None, dropped: list[str]) -> Emit:
    """A resumed run's MCP tool listing was no longer kept and its server lists other tools now: the
    run goes on with the server's current schemas of its tools (``dropped``: those no longer listed)."""
    return status_event(
        "mcp_tools_relisted",
        server=server,
        listing=listing,
        nowListing=now,
        dropped=dropped,
        reason="the tool listing this run started with was no longer kept; the server's current one is used",
    )


def capacity_wait(req: ModelRequest, reason: str, wait_ms: int) -> Emit:
    """The call waits for pool-wide capacity of its provider (once per wait)."""
    return status_event("waiting_for_capacity", modelCallIndex=req.model_call_index, attempt=req.attempt,
                        reason=reason, waitMs=wait_ms)  # fmt: skip


def model_delta(req: ModelRequest, delta_seq: int, body: dict[str, Any]) -> Emit:
    """Streamed text or reasoning (``body`` has ``text`` or ``reasoning``, or tool-call fragments)."""
    return Emit(
        EventKind.MODEL_DELTA,
        {"modelCallIndex": req.model_call_index, "attempt": req.attempt, "deltaSeq": delta_seq, **body},
    )


def tool_attempt_failed(call: ToolCall, attempt: int, reason: str) -> list[Emit]:
    """An attempt of a tool call failed and will be tried again: its error, then the retry notice."""
    return [
        error_event(
            "tool",
            "tool_attempt_failed",
            reason,
            retryable=True,
            toolCallId=call.id,
            name=call.name,
            attempt=attempt,
        ),
        status_event("tool_retrying", toolCallId=call.id, name=call.name, attempt=attempt, reason=reason),
    ]


def tool_reexecuted(call: ToolCall, claim: int) -> Emit:
    """A claimed call whose worker died before recording a result runs again (same Idempotency-Key)."""
    return status_event("tool_reexecuted", toolCallId=call.id, name=call.name, claim=claim,
                        reason="the worker executing this call stopped before recording its result")  # fmt: skip


def lane_changed(req: ModelRequest, reason: str) -> Emit:
    """An economy call made on the standard lane instead (``reason``: ``deadline``, ``expired``,
    ``failed: …``, ``economy_full``…)."""
    return status_event(
        "lane_changed", modelCallIndex=req.model_call_index, lane="standard", reason=reason[:200]
    )
