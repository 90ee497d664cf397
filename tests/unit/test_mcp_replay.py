"""One run's MCP exchange recorded from the mcp package's server (tests/data/mcp/transcript.json,
written by tests/integration/test_mcp_tools.py with AGENTMILL_RECORD=1) replayed through the SDK
client and the ToolPort without the server: the listing, the calls with their idempotency keys, and
what the model reads of each answer."""

from __future__ import annotations

import pytest

from shared.profiles import McpServerConfig
from tests.support import mcp_transcript as t
from worker.tools.mcp import McpServer
from worker.tools.mcp_transport import McpConfigError
from worker.tools.registry import Toolbox

REC = t.load()


def replaying(replay: t.Replay) -> Toolbox:
    def server(cfg: McpServerConfig) -> McpServer:
        return McpServer(cfg, replay)

    return Toolbox(None, mcp=server)


async def test_a_recorded_run_replays_request_for_request() -> None:
    replay = t.Replay(REC)
    specs, results = await t.drive(replaying(replay), t.profile("http://127.0.0.1:9/mcp"))
    assert not replay.todo  # every recorded request was sent again, in order, and nothing else
    assert list(specs) == ["srv__add", "srv__slow", "srv__boom", "srv__picture", "srv__whoami"]
    assert specs["srv__add"].description == "Add two integers."
    assert specs["srv__add"].parameters["required"] == ["a", "b"]
    assert [(r.name, r.is_error, r.content) for r in results] == [
        ("srv__add", False, "42"),
        ("srv__boom", True, "Error executing tool boom"),
        ("srv__picture", False, "[image: image/png, 100 bytes]"),
        ("srv__whoami", False, '{\n  "authorization": "Bearer recorded"\n}'),
    ]
    called = [s for s in replay.sent if (s["body"] or {}).get("method") == "tools/call"]
    keys = [f"{t.RUN_ID}:{c.id}" for c in t.CALLS]
    assert [s["headers"]["idempotency-key"] for s in called] == keys
    assert [s["body"]["params"]["_meta"]["idempotencyKey"] for s in called] == keys
    assert [s["headers"]["agentmill-fencing-token"] for s in called] == ["1", "2", "3", "4"]
    assert all(s["headers"]["authorization"] == "Bearer recorded" for s in replay.sent)


async def test_the_listing_is_kept_for_its_ttl_and_asked_again_when_stale() -> None:
    listing = REC[:2]  # server/discover, tools/list
    replay = t.Replay(listing)
    box = replaying(replay)
    prof = t.profile("http://127.0.0.1:9/mcp")
    await box.specs(prof)
    await box.specs(prof)  # kept: no request
    assert not replay.todo
    replay.todo = [REC[1]]  # the pinned version: only tools/list this time
    box._of(prof).servers["srv"].stale()  # what tools/list_changed does
    assert "srv__add" in await box.specs(prof)
    assert not replay.todo


async def test_a_header_naming_an_unset_variable_refuses_before_any_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("MCP_UNSET_TOKEN", raising=False)
    replay = t.Replay([])  # any request would fail the replay
    prof = t.profile("http://127.0.0.1:9/mcp")
    cfg = prof.mcp_servers[0].model_copy(
        update={"headers": {"Authorization": "Bearer ${env:MCP_UNSET_TOKEN}"}}
    )
    prof = prof.model_copy(update={"mcp_servers": [cfg]})
    with pytest.raises(McpConfigError, match="MCP_UNSET_TOKEN"):
        await replaying(replay).specs(prof)  # the run is refused at its start, naming the variable
    res = await replaying(replay).execute(prof, t.CALLS[0], t.context(0))
    assert res.is_error and "MCP_UNSET_TOKEN" in res.content and "after" not in res.content  # not retried
    assert replay.sent == []
