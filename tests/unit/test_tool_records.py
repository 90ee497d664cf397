"""The tool record (shared/tool_records.py): the JSON it writes is the JSON the Lua and the readers
know, and reading it back gives the same record."""

from __future__ import annotations

import orjson
import pytest

from agentmill_client.models import ToolCall, ToolResult
from shared.tool_records import ToolRecord, ToolState

RESULT = ToolResult(tool_call_id="c1.0", name="echo", content="hi")


@pytest.mark.parametrize(
    ("record", "wire"),
    [
        (ToolRecord.claim(2), {"state": "pending", "epoch": 2, "attempts": 1}),  # as commit.lua writes it
        (
            ToolRecord.claim(3, ToolRecord.claim(2)),
            {"state": "pending", "epoch": 3, "attempts": 2},
        ),
        (
            ToolRecord.finished(2, 1, RESULT),
            {"state": "done", "epoch": 2, "attempts": 1,
             "result": {"toolCallId": "c1.0", "name": "echo", "content": "hi", "isError": False}},
        ),
        (
            ToolRecord.offered(ToolCall(id="c1.0", name="ask", arguments='{"q":1}'), 5_000, 1_000),
            {"state": "client_pending", "client": True, "name": "ask", "arguments": '{"q":1}',
             "deadlineMs": 5_000, "timeoutMs": 1_000},
        ),
    ],
)  # fmt: skip
def test_each_record_writes_the_json_the_scripts_read_and_reads_back_the_same(
    record: ToolRecord, wire: dict[str, object]
) -> None:
    assert orjson.loads(record.to_json()) == wire
    assert list(record.to_dict()) == list(wire)  # the field order of the literals it replaces
    assert ToolRecord.from_json(record.to_json()) == record


def test_a_client_call_timed_out_by_the_scripts_is_read_as_done_with_its_error() -> None:
    # prelude.lua client_settle writes this once a client call is past its deadline.
    raw = orjson.dumps({"state": "done", "client": True, "timedOut": True,
                        "result": {"toolCallId": "c1.0", "name": "ask", "content": "error: …", "isError": True}})  # fmt: skip
    rec = ToolRecord.from_json(raw)
    assert rec.done and rec.client and rec.timed_out and rec.attempts == 0
    assert rec.recorded == ToolResult(tool_call_id="c1.0", name="ask", content="error: …", is_error=True)
    assert orjson.loads(rec.to_json()) == orjson.loads(raw)


def test_only_a_done_record_has_a_result_to_serve() -> None:
    assert ToolRecord.claim(1).recorded is None
    assert ToolRecord(ToolState.PENDING, 1, 1, result=RESULT).recorded is None
    assert ToolRecord.finished(1, 1, RESULT).recorded == RESULT


@pytest.mark.parametrize("raw", [b"[]", b'"done"', b'{"state": "lost"}', b"{}"])
def test_what_is_not_a_tool_record_is_refused_with_a_value_error(raw: bytes) -> None:
    with pytest.raises(ValueError, match="tool record"):
        ToolRecord.from_json(raw)
