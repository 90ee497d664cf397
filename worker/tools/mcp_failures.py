"""What a failed MCP operation becomes: the real failure inside the SDK's exception groups, and a
failed tools/call as a ToolError, retryable when the server may answer next time."""

from __future__ import annotations

import asyncio

import httpx2
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult

from shared.netguard import BlockedAddressError, ResponseTooLargeError
from worker.adapters.lease import LeaseExpiredError
from worker.tools.base import ToolError
from worker.tools.mcp_answer import AnswerBoundError
from worker.tools.mcp_transport import McpConfigError

__all__ = ["call_failure", "innermost", "unchecked"]


def innermost(exc: BaseException) -> BaseException:
    """The first real failure inside the SDK's task-group exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


async def unchecked(name: str, result: CallToolResult) -> None:
    """In place of the SDK's check of a result against the tool's output schema (McpServer.call's)."""


def call_failure(name: str, exc: BaseException) -> BaseException:
    """A failed tools/call as a ToolError: retryable when the server may answer next time."""
    if isinstance(exc, asyncio.CancelledError | KeyboardInterrupt | SystemExit | LeaseExpiredError):
        return exc  # not the tool's failure: the run stops (a lapsed lease writes nothing)
    if isinstance(exc, McpConfigError):
        return ToolError(f"{name}: {exc}")
    if isinstance(exc, BlockedAddressError):
        return ToolError(f"refused: {exc}")
    if isinstance(exc, ResponseTooLargeError):
        return ToolError(str(exc))
    if isinstance(exc, AnswerBoundError):
        return ToolError(f"{name}: refused: {exc}")
    if isinstance(exc, TimeoutError | httpx2.TimeoutException):
        return ToolError(f"{name} timed out", retryable=True)
    if isinstance(exc, httpx2.TransportError | OSError):
        return ToolError(f"{name} unreachable: {type(exc).__name__}", retryable=True)
    if isinstance(exc, MCPError):
        # -32000..-32099 are the server's own; a closed connection (-32000 CONNECTION_CLOSED) or an
        # internal error (-32603, what a 5xx becomes) may pass; a bad request or unknown tool will not.
        retryable = exc.code in (-32000, -32603)
        return ToolError(f"{name}: MCP error {exc.code}: {exc.error.message}", retryable=retryable)
    return ToolError(f"{name}: {type(exc).__name__}: {exc}")
