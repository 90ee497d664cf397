"""An MCP server's outputSchema on the bounded validator, replayed from the recorded run: a schema
past a bound refuses the call before it is sent, a result that does not fit fails the call, and the
run's other calls go on as recorded."""

from __future__ import annotations

from typing import Any

import orjson

from shared.profiles import McpServerConfig
from tests.support import mcp_transcript as t
from tests.support.schemas import REDOS, doubling
from worker.tools.mcp import McpServer
from worker.tools.registry import Toolbox

REC = t.load()


def listed_with(outputs: dict[str, Any]) -> list[Any]:
    """The recording with the tools/list answer's outputSchema of each named tool replaced."""
    rec = [dict(ex) for ex in REC]
    answer = orjson.loads(rec[1]["answer"])
    for tool in answer["result"]["tools"]:
        if tool["name"] in outputs:
            tool["outputSchema"] = outputs[tool["name"]]
    rec[1]["answer"] = orjson.dumps(answer).decode()
    return rec


def replaying(replay: t.Replay) -> Toolbox:
    def server(cfg: McpServerConfig) -> McpServer:
        return McpServer(cfg, replay)

    return Toolbox(None, mcp=server)


async def test_an_output_schema_past_a_bound_refuses_the_call_before_it_is_sent() -> None:
    rec = listed_with({"add": doubling()})
    replay = t.Replay([ex for i, ex in enumerate(rec) if i != 2])  # add's tools/call is never sent
    _, results = await t.drive(replaying(replay), t.profile("http://127.0.0.1:9/mcp"))
    assert not replay.todo
    add, *rest = results
    assert (
        add.is_error
        and "outputSchema cannot be applied" in add.content
        and "(bound: branches)" in add.content
    )
    assert "the call was not sent" in add.content
    assert [(r.name, r.is_error) for r in rest] == [
        ("srv__boom", True),
        ("srv__picture", False),
        ("srv__whoami", False),
    ]


async def test_a_result_is_checked_on_the_bounded_validator_not_the_sdk() -> None:
    pattern = {"type": "object", "properties": {"authorization": {"type": "string", "pattern": REDOS}}}
    rec = listed_with(
        {"add": {"type": "object", "properties": {"result": {"type": "string"}}}, "whoami": pattern}
    )
    replay = t.Replay(rec)
    _, results = await t.drive(replaying(replay), t.profile("http://127.0.0.1:9/mcp"))
    assert not replay.todo
    assert results[0].is_error and results[0].content == (
        "error: srv__add: invalid structured content: result: 42 is not of type 'string'"
    )
    assert results[3].is_error and "invalid structured content: authorization:" in results[3].content
    assert "does not match '^(a|aa)*$'" in results[3].content
