"""The shape of an MCP answer counted from its bytes (worker/tools/mcp_answer.py): brackets inside
strings, escaped quotes and a chunk cut anywhere change nothing."""

from __future__ import annotations

import orjson
import pytest

from worker.tools.mcp_answer import AnswerBoundError, AnswerShape
from worker.tools.mcp_bounds import ListingRefusedError
from worker.tools.mcp_listing_shape import ListingShape


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


def _tool(i: int) -> dict[str, object]:
    schema = {"type": "object", "properties": {"a": {"type": "array", "items": [{"type": "string"}]}}}
    return {"name": f"t{i}", "description": 'a "{[" \\ \\" ]}', "inputSchema": schema}


def listed(tools: int, size: int, sse: bool = False, max_tools: int = 5) -> ListingShape:
    msg = orjson.dumps({"jsonrpc": "2.0", "id": 1, "result": {"tools": [_tool(i) for i in range(tools)],
                                                             "_meta": {"x": [{"y": 1}]}}})  # fmt: skip
    body = b"event: message\ndata: " + msg + b"\n\n" if sse else msg
    shape = ListingShape(max_tools)
    for i in range(0, len(body), size):
        shape.feed(body[i : i + size])
    return shape


@pytest.mark.parametrize("size", [1, 3, 64, 100_000])
@pytest.mark.parametrize("sse", [False, True])
def test_a_listing_counts_its_tools_not_their_schemas_nor_its_meta(size: int, sse: bool) -> None:
    assert listed(5, size, sse).tools == 5
    with pytest.raises(ListingRefusedError, match=r"more than 5 tools \(bound: maxTools"):
        listed(6, size, sse)
