"""A hostile MCP server for the tests, on the ``mcp`` package's own server (``MCPServer``) over
streamable HTTP in a process of its own: a listing as large as asked (``TOOLS`` tools, each with an
input schema of ``SCHEMA_BYTES``, ``PAGE`` to a page of tools/list), a tool ``blocks`` that answers
``n`` tiny text blocks, and a tool ``storm`` that sends ``n`` tools/list_changed notices.

    python -m tests.support.mcp_flood_server PORT TOOLS SCHEMA_BYTES PAGE
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp_types import CallToolResult, ListToolsResult, PaginatedRequestParams, TextContent

from tests.support.mcp_server import McpServerProc
from tests.support.redis_server import free_port

__all__ = ["flood_server"]


@contextmanager
def flood_server(
    tmp: Path, tools: int = 3, schema_bytes: int = 100, page: int = 100
) -> Iterator[McpServerProc]:
    port = free_port()
    args = (str(tools), str(schema_bytes), str(page))
    srv = McpServerProc(port, tmp / "flood.jsonl", module=__name__, args=args).start()
    try:
        yield srv
    finally:
        srv.stop()


class _Paged(MCPServer):
    page = 100

    async def _handle_list_tools(self, ctx: Any, params: PaginatedRequestParams | None) -> ListToolsResult:
        tools = await self.list_tools()
        at = int(params.cursor) if params is not None and params.cursor else 0
        more = at + self.page < len(tools)
        return ListToolsResult(
            tools=tools[at : at + self.page], next_cursor=str(at + self.page) if more else None
        )


def main(port: int, tools: int, schema_bytes: int, page: int) -> None:
    srv = _Paged("agentmill-flood")
    srv.page = page

    @srv.tool()
    def blocks(n: int) -> CallToolResult:
        """Answers n tiny text blocks."""
        return CallToolResult(content=[TextContent(text="x") for _ in range(n)])

    @srv.tool()
    async def storm(n: int, ctx: Context) -> str:
        """Sends n tools/list_changed notices."""
        for _ in range(n):
            await ctx.notify_tools_changed()
        return f"sent {n}"

    def filler() -> str:
        return "ok"

    pad = {"type": "object", "description": "p" * max(0, schema_bytes - 40)}
    for i in range(tools):
        srv.add_tool(filler, name=f"t{i}", description="filler")
    for name, tool in srv._tool_manager._tools.items():
        if name.startswith("t") and name[1:].isdigit():
            tool.parameters = dict(pad)
    srv.run("streamable-http", host="127.0.0.1", port=port)


if __name__ == "__main__":
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]  # the log, as it happens
    main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
