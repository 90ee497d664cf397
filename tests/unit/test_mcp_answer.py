"""The shape of an MCP answer counted from its bytes (worker/tools/mcp_answer.py): brackets inside
strings, escaped quotes and a chunk cut anywhere change nothing."""

from __future__ import annotations

import orjson
import pytest

from worker.tools.mcp_answer import AnswerBoundError, AnswerShape


def fed(body: bytes, size: int, **bounds: int) -> AnswerShape:
    shape = AnswerShape(**bounds)
    for i in range(0, len(body), size):
        shape.feed(body[i : i + size])
    return shape


TRICKY = orjson.dumps({"content": [{"type": "text", "text": 'a "{[" \\ \\" ]}' * 50}, {"n": [1, [2]]}]})


@pytest.mark.parametrize("size", [1, 2, 3, 7, 64, len(TRICKY)])
def test_brackets_in_strings_and_escapes_are_not_counted_wherever_the_chunks_are_cut(size: int) -> None:
    assert fed(TRICKY, size, max_items=6, max_depth=5).items == 6


def test_past_the_items_or_the_depth_the_answer_is_refused_naming_the_bound() -> None:
    blocks = orjson.dumps({"content": [{"type": "text", "text": "x"}] * 200})
    with pytest.raises(AnswerBoundError, match="maxAnswerItems"):
        fed(blocks, 64, max_items=100)
    deep = b"[" * 40 + b"]" * 40
    with pytest.raises(AnswerBoundError, match="maxAnswerDepth"):
        fed(deep, 5, max_depth=32)
    assert fed(b"[" * 32 + b"]" * 32, 5, max_depth=32).items == 32
