"""What a worker makes of an MCP server's names and answers: the name a tool is offered under, and
a ``tools/call`` result as the model reads it."""

from __future__ import annotations

import base64
import contextlib
import re

import orjson
from mcp_types import CallToolResult

from shared.profiles import MCP_SEP

__all__ = ["exposed_name", "render"]

_NAME_OK = re.compile(r"[^A-Za-z0-9_-]")
_MAX_NAME = 64  # what OpenAI-compatible providers take as a function name


def exposed_name(server: str, tool: str) -> str | None:
    """``<server>__<tool>`` with characters a provider refuses made ``_``; None when too long."""
    name = f"{server}{MCP_SEP}{_NAME_OK.sub('_', tool)}"
    return name if len(name) <= _MAX_NAME else None


def _size(data: str) -> int:
    with contextlib.suppress(ValueError):
        return len(base64.b64decode(data, validate=False))
    return len(data) * 3 // 4


def render(result: CallToolResult) -> str:
    """The result as the model reads it: text parts joined, structured content as JSON when no
    text says it, images and audio as a placeholder naming their type and size."""
    parts: list[str] = []
    for block in result.content:
        kind = block.type
        if kind == "text":
            parts.append(block.text)  # type: ignore[union-attr]
        elif kind in ("image", "audio"):
            parts.append(f"[{kind}: {block.mime_type}, {_size(block.data)} bytes]")  # type: ignore[union-attr]
        elif kind == "resource_link":
            parts.append(f"[resource: {block.uri}]")  # type: ignore[union-attr]
        elif kind == "resource":
            res = block.resource  # type: ignore[union-attr]
            text = getattr(res, "text", None)
            blob = getattr(res, "blob", None)
            parts.append(
                text
                if text is not None
                else f"[resource: {res.uri}, {res.mime_type}, {_size(blob or '')} bytes]"
            )
    if result.structured_content is not None and not any(b.type == "text" for b in result.content):
        parts.append(orjson.dumps(result.structured_content).decode())
    return "\n".join(parts)
