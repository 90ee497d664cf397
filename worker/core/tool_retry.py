"""A tool call's retry, as the tool port reports it to the runner (``ToolPort.execute``'s ``on_retry``)."""

from __future__ import annotations

from dataclasses import dataclass

from agentmill_client.models import ToolCall

__all__ = ["ToolRetry"]


@dataclass(frozen=True, slots=True)
class ToolRetry:
    """Reported for each retry of a tool call (the runner publishes it and counts it)."""

    call: ToolCall
    attempt: int
    reason: str
