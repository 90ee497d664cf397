"""Reading an MCP server's tool listing over one connection: every page of tools/list, within the
listing's bounds (pages, tools, bytes: worker/tools/mcp_bounds.py), each allowed tool under its
exposed name ``<server>__<tool>``, with the output schemas the server declares."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from mcp import Client
from mcp_types import ListToolsResult

from shared.profiles import McpServerConfig
from worker.tools.mcp_bounds import (
    MAX_LISTING_BYTES,
    MAX_PAGES,
    MAX_TOOL_BYTES,
    MAX_TOOLS,
    ListingRefusedError,
    tool_bytes,
)
from worker.tools.mcp_content import exposed_name

__all__ = ["Listed", "ListedTool", "read_pages"]

log = logging.getLogger("agentmill.mcp")


@dataclass(frozen=True, slots=True)
class ListedTool:
    remote: str  # the tool's name on its server
    description: str
    parameters: dict[str, Any]


@dataclass(slots=True)
class Listed:
    tools: dict[str, ListedTool] = field(default_factory=dict)  # by exposed name
    output_schemas: dict[str, dict[str, Any]] = field(
        default_factory=dict
    )  # by the tool's name on its server
    pages: list[ListToolsResult] = field(default_factory=list)  # as the server sent them


async def read_pages(client: Client, cfg: McpServerConfig) -> Listed:
    """The server's listing; ListingRefusedError past a bound."""
    allow = None if cfg.allow_tools is None else set(cfg.allow_tools)
    got = Listed()
    listed = kept = 0
    cursor: str | None = None
    for n in range(MAX_PAGES + 1):
        if n == MAX_PAGES:
            raise ListingRefusedError(f"the server lists more than {MAX_PAGES} pages of tools", "maxPages")
        page = await client.list_tools(cursor=cursor)
        got.pages.append(page)
        listed += len(page.tools)
        if listed > MAX_TOOLS:
            raise ListingRefusedError(f"the server lists more than {MAX_TOOLS} tools", "maxTools")
        for t in page.tools:
            if allow is not None and t.name not in allow:
                continue
            name = exposed_name(cfg.name, t.name)
            if name is None or name in got.tools:
                log.warning("MCP server %s: tool %r not offered (its name is too long or taken)",
                            cfg.name, t.name)  # fmt: skip
                continue
            size = tool_bytes(t)
            if size > MAX_TOOL_BYTES:
                log.warning("MCP server %s: tool %r not offered (%d bytes of name, description and "
                            "schemas, over %d)", cfg.name, t.name, size, MAX_TOOL_BYTES)  # fmt: skip
                continue
            kept += size
            if kept > MAX_LISTING_BYTES:
                raise ListingRefusedError(
                    f"the server's tools are more than {MAX_LISTING_BYTES} bytes together",
                    "maxListingBytes",
                )
            got.tools[name] = ListedTool(t.name, t.description or "", dict(t.input_schema))
            if t.output_schema is not None:
                got.output_schemas[t.name] = dict(t.output_schema)
        cursor = page.next_cursor
        if cursor is None:
            break
    return got
