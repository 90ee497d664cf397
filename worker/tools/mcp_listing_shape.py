"""The size of an MCP server's tools/list answer in tools, counted before the SDK parses it.

``MAX_TOOLS`` bounds a server's listing, but counting its tools after the SDK parsed a page costs
what the bound is there to avoid: the SDK turns every tool of the page into models, serializes them
again and walks each input schema, about 30 ms of CPU in one turn of the event loop for a page of
1,000 tools of 2 kB (each listing, with ``toolsTtlS`` 0). So a tools/list answer's bytes pass through a ``ListingShape`` as they
arrive (worker/tools/mcp_transport.py), as a tools/call answer's pass through ``AnswerShape``: it
follows the JSON's brackets outside strings (``Brackets``) and counts the objects directly inside an
array three levels down (``{"result": {"tools": [{…}, …]}}``), refusing the answer as soon as they
are more than ``MAX_TOOLS``: the listing is refused as it would have been after parsing, having cost
a few C-level passes over the bytes that crossed the bound. An SSE stream's other messages are
counted the same way (a server's own extra arrays can only make it refused sooner).
"""

from __future__ import annotations

from worker.tools.mcp_answer import Brackets
from worker.tools.mcp_bounds import MAX_TOOLS, ListingRefusedError

__all__ = ["ListingShape"]

_TOOLS_DEPTH = 3  # message {, result {, tools [


class ListingShape:
    """The tools of a tools/list answer, fed chunk by chunk (``feed``)."""

    def __init__(self, max_tools: int = MAX_TOOLS) -> None:
        self.max_tools = max_tools
        self.tools = 0
        self._brackets = Brackets()
        self._depth = 0
        self._opened = bytearray()  # the brackets open at the first _TOOLS_DEPTH levels

    def feed(self, chunk: bytes) -> None:
        """ListingRefusedError once the bytes so far list more than ``max_tools`` tools."""
        for c in self._brackets.outside(chunk):
            if c in b"{[":
                if c == ord("{") and self._depth == _TOOLS_DEPTH and self._opened[-1] == ord("["):
                    self.tools += 1
                    if self.tools > self.max_tools:
                        raise ListingRefusedError(
                            f"the server lists more than {self.max_tools} tools", "maxTools"
                        )
                self._depth += 1
                if self._depth <= _TOOLS_DEPTH:
                    self._opened.append(c)
            else:
                if 0 < self._depth <= _TOOLS_DEPTH:
                    self._opened.pop()
                self._depth = max(0, self._depth - 1)
