"""An MCP tool's ``outputSchema`` applied to its results on this worker's own bounded validator.

The SDK would validate a result's structured content itself, with no bound on the schema a server
sends (a backtracking pattern, references that double at each level); McpServer turns that off and
asks here instead. A schema past its bounds (shared/schema_bounds.py) refuses the call before it is
sent; a result that does not fit fails the call. Either way the model gets an error result and the
run goes on.
"""

from __future__ import annotations

from typing import Any

from mcp_types import CallToolResult

from shared.schema_validator import SchemaBoundError, compiled, validation_errors
from worker.tools.base import ToolError

__all__ = ["check_result", "check_schema"]


def check_schema(name: str, schema: dict[str, Any] | None) -> None:
    """ToolError (not retried) when the tool's outputSchema is past a bound: the call is not sent."""
    if schema is None:
        return
    try:
        compiled(schema)
    except SchemaBoundError as exc:
        raise ToolError(
            f"{name}: the server's outputSchema cannot be applied: {exc.message} (bound: {exc.bound}); "
            "the call was not sent"
        ) from None


def check_result(name: str, schema: dict[str, Any] | None, result: CallToolResult) -> None:
    """ToolError when a successful result does not fit the tool's outputSchema."""
    if schema is None or result.is_error:
        return
    if result.structured_content is None:
        raise ToolError(f"{name}: the tool has an outputSchema but returned no structured content")
    try:
        errors = validation_errors(schema, result.structured_content, 1)
    except SchemaBoundError as exc:
        raise ToolError(
            f"{name}: the server's outputSchema cannot be applied: {exc.message} (bound: {exc.bound})"
        ) from None
    if errors:
        where = "/".join(str(p) for p in errors[0].absolute_path) or "(root)"
        raise ToolError(f"{name}: invalid structured content: {where}: {errors[0].message[:300]}")
