"""The bounds of an MCP server's tool listing, declared once: past ``MAX_PAGES``, ``MAX_TOOLS`` or
``MAX_LISTING_BYTES`` a listing is refused whole (``ListingRefusedError``: none of its tools are
offered, the reason logged and given to a call); one tool past ``MAX_TOOL_BYTES`` is left out."""

from __future__ import annotations

from typing import Any

import orjson

__all__ = [
    "MAX_LISTING_BYTES",
    "MAX_PAGES",
    "MAX_TOOLS",
    "MAX_TOOL_BYTES",
    "ListingRefusedError",
    "tool_bytes",
]

MAX_PAGES = 20  # tools/list pages read per listing
MAX_TOOLS = 256  # tools a server lists (all of them, allowed or not)
MAX_TOOL_BYTES = 64_000  # one tool's name, description and schemas, as JSON
MAX_LISTING_BYTES = 1_000_000  # the offered tools' together


class ListingRefusedError(ValueError):
    """A server's listing past a bound: none of its tools are offered; ``bound`` names it."""

    def __init__(self, message: str, bound: str) -> None:
        super().__init__(f"{message} (bound: {bound})")
        self.bound = bound


def tool_bytes(t: Any) -> int:
    """A listed tool's name, description and schemas, in bytes as JSON."""
    return (
        len(t.name)
        + len(t.description or "")
        + len(orjson.dumps(t.input_schema))
        + (len(orjson.dumps(t.output_schema)) if t.output_schema is not None else 0)
    )
