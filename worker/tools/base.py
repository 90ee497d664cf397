"""The tool port: a tool takes parsed arguments and returns a ToolOutcome or raises ToolError."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = ["Tool", "ToolContext", "ToolError", "ToolOutcome"]


@dataclass(frozen=True, slots=True)
class ToolContext:
    run_id: str
    session_id: str | None
    tool_call_id: str
    idempotency_key: str  # "<runId>:<toolCallId>": the same for every re-execution of the call
    attempt: int  # 1 for the first execution within this claim
    init_data: Mapping[str, Any] = field(default_factory=dict)  # the run's runtimeInitData
    fencing_token: int = 0  # the run's epoch: higher for every worker that takes the run over


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    content: str
    is_error: bool = False


class ToolError(Exception):
    """A tool failure the model should see; ``retryable`` ones are tried again first."""

    def __init__(self, message: str, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.retryable = retryable


class Tool(Protocol):
    name: str
    description: str
    parameters: dict[str, Any]

    async def __call__(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutcome: ...
