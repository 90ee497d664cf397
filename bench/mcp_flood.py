"""An MCP server (the ``mcp`` package's own, streamable HTTP) whose listing and answers are as large
as one tenant's server may make them: ``python -m bench.mcp_flood PORT TOOLS DESCRIPTION_CHARS
ANSWER_CHARS``. It lists TOOLS tools, each described in DESCRIPTION_CHARS characters, and its
``big`` tool answers ANSWER_CHARS characters. Figure 9's MCP attack points a profile at it."""

from __future__ import annotations

import sys
from typing import Any

from mcp.server.mcpserver import MCPServer

__all__ = ["PATH", "flood_server"]

PATH = "/mcp"


def flood_server(tools: int, description_chars: int, answer_chars: int) -> MCPServer[Any]:
    srv: MCPServer[Any] = MCPServer("bench-flood")
    answer = "y" * answer_chars

    def big() -> str:
        return answer

    srv.add_tool(big, name="big", description="A large answer.")
    for i in range(tools):

        def filler() -> str:
            return "filler"

        srv.add_tool(filler, name=f"filler{i}", description=f"{i} " + "x" * description_chars)
    return srv


if __name__ == "__main__":
    port, tools, description_chars, answer_chars = (int(a) for a in sys.argv[1:5])
    flood_server(tools, description_chars, answer_chars).run("streamable-http", host="127.0.0.1", port=port)
