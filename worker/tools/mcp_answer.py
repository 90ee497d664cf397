"""The shape of an MCP server's answer to tools/call, bounded before the SDK parses it.

The transport caps an answer's bytes, but what parsing it costs depends on how many items it holds:
4 MB of tiny content blocks is 150,000 pydantic models and seconds of a blocked event loop. So the
answer's bytes pass through an ``AnswerShape`` as they arrive, before the SDK sees them: it keeps
only the JSON structure outside strings (its brackets) and refuses the answer as soon as it holds
more than ``MAX_ANSWER_ITEMS`` objects and arrays (a content block is an object) or nests deeper
than ``MAX_ANSWER_DEPTH``. Each chunk costs a few C-level passes over its bytes (``replace``,
``split``, ``translate``), so an answer past a bound is refused after the bytes that crossed it,
never parsed.
"""

from __future__ import annotations

__all__ = ["MAX_ANSWER_DEPTH", "MAX_ANSWER_ITEMS", "AnswerBoundError", "AnswerShape", "Brackets"]

MAX_ANSWER_ITEMS = 5_000  # JSON objects and arrays in one tools/call answer (content blocks and all)
MAX_ANSWER_DEPTH = 32  # how deep they nest

_NOT_BRACKETS = bytes(c for c in range(256) if c not in b"{}[]")


class AnswerBoundError(ValueError):
    """An answer past a bound, refused before it was parsed; ``bound`` names it."""

    def __init__(self, message: str, bound: str) -> None:
        super().__init__(f"{message} (bound: {bound})")
        self.bound = bound


class Brackets:
    """The brackets of a JSON text outside its strings, chunk by chunk (``outside``): what the
    answer's and the listing's shapes (worker/tools/mcp_listing_shape.py) count."""

    def __init__(self) -> None:
        self._in_string = False
        self._escaped = False  # the chunk before ended on a backslash inside a string

    def outside(self, chunk: bytes) -> bytes:
        if self._escaped and chunk:
            chunk, self._escaped = chunk[1:], False
        # Escapes only occur inside strings: drop them so that every '"' left opens or closes one.
        chunk = chunk.replace(b"\\\\", b"").replace(b'\\"', b"")
        if chunk.endswith(b"\\"):
            chunk, self._escaped = chunk[:-1], True
        parts = chunk.split(b'"')
        outside = parts[1::2] if self._in_string else parts[0::2]
        if len(parts) % 2 == 0:
            self._in_string = not self._in_string
        return b"".join(outside).translate(None, _NOT_BRACKETS)


class AnswerShape:
    """The brackets of an answer's JSON outside its strings, fed chunk by chunk (``feed``)."""

    def __init__(self, max_items: int = MAX_ANSWER_ITEMS, max_depth: int = MAX_ANSWER_DEPTH) -> None:
        self.max_items = max_items
        self.max_depth = max_depth
        self.items = 0
        self._depth = 0  # brackets open now
        self._brackets = Brackets()

    def feed(self, chunk: bytes) -> None:
        """AnswerBoundError once the bytes so far are past a bound."""
        brackets = self._brackets.outside(chunk)
        self.items += brackets.count(b"{") + brackets.count(b"[")
        if self.items > self.max_items:
            raise AnswerBoundError(
                f"the MCP server's answer holds more than {self.max_items} JSON objects and arrays",
                "maxAnswerItems",
            )
        for c in brackets:  # at most 2 * max_items of them in all, before the bound above
            self._depth += 1 if c in b"{[" else -1
            if self._depth > self.max_depth:
                raise AnswerBoundError(
                    f"the MCP server's answer nests JSON more than {self.max_depth} deep", "maxAnswerDepth"
                )
