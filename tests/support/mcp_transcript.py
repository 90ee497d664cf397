"""One run's MCP traffic, recorded from the real server and replayed without it.

``drive`` does what a run's worker does with an MCP server: list its tools when the run starts,
then execute the run's calls through the ToolPort (schema check, retries), each with its
Idempotency-Key. ``record`` drives it against a live server (tests/support/mcp_server.py) through
the guarded transport and returns every HTTP exchange (request headers and JSON-RPC body, answer
status, content type and body): tests/data/mcp/transcript.json, written by
tests/integration/test_mcp_tools.py with AGENTMILL_RECORD=1. ``Replay`` is an ``httpx2``
transport that answers the same requests with the recorded answers, checking each request against
the one recorded (tests/unit/test_mcp_replay.py runs in CI without the server).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx2
import orjson

from agentmill_client.models import ToolCall, ToolResult
from shared.netguard import guarded_client
from shared.profiles import AgentProfile, McpServerConfig, ToolSettings
from worker.core.config import ToolSpec
from worker.tools.base import ToolContext
from worker.tools.mcp import McpServer
from worker.tools.mcp_transport import Exchange, GuardedMcpTransport
from worker.tools.registry import Toolbox

__all__ = ["CALLS", "RUN_ID", "TRANSCRIPT", "Replay", "context", "drive", "load", "profile", "record", "save"]

TRANSCRIPT = Path(__file__).resolve().parents[1] / "data" / "mcp" / "transcript.json"
RUN_ID = "run_recorded"
CALLS = [
    ToolCall(id="c1.0", name="srv__add", arguments='{"a": 40, "b": 2}'),
    ToolCall(id="c1.1", name="srv__boom", arguments="{}"),
    ToolCall(id="c1.2", name="srv__picture", arguments="{}"),
    ToolCall(id="c2.0", name="srv__whoami", arguments="{}"),
]


def profile(url: str) -> AgentProfile:
    server = McpServerConfig(
        name="srv", url=url, allow_hosts=["127.0.0.1"], headers={"Authorization": "Bearer recorded"},
        allow_tools=["add", "slow", "boom", "picture", "whoami"],
    )  # fmt: skip
    return AgentProfile(
        name="mcp", mcp_servers=[server], tool_settings={"srv__add": ToolSettings(retry_delay_ms=0)}
    )


async def drive(toolbox: Toolbox, prof: AgentProfile) -> tuple[dict[str, ToolSpec], list[ToolResult]]:
    specs = await toolbox.specs(prof)
    out = []
    for i, c in enumerate(CALLS):
        out.append(await toolbox.execute(prof, c, context(i)))
    return specs, out


def context(i: int) -> ToolContext:
    """The context of the run's ``i``-th call (its fencing token ``i + 1``)."""
    c = CALLS[i]
    return ToolContext(RUN_ID, None, c.id, f"{RUN_ID}:{c.id}", 1, {}, fencing_token=i + 1)


async def record(url: str) -> list[Exchange]:
    seen: list[Exchange] = []
    http = guarded_client()

    def server(cfg: McpServerConfig) -> McpServer:
        return McpServer(cfg, GuardedMcpTransport(http, allow_hosts=cfg.allow_hosts, record=seen.append))

    try:
        await drive(Toolbox(http, mcp=server), profile(url))
    finally:
        await http.aclose()
    return seen


def save(exchanges: list[Exchange], path: Path = TRANSCRIPT) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(orjson.dumps({"exchanges": exchanges}, option=orjson.OPT_INDENT_2) + b"\n")


def load(path: Path = TRANSCRIPT) -> list[Exchange]:
    return list(orjson.loads(path.read_bytes())["exchanges"])


def shape(ex: Exchange) -> tuple[Any, ...]:
    """What must be the same in a request sent again: the HTTP method, the JSON-RPC method, the
    tool and its arguments, and both places the idempotency key goes."""
    body = ex.get("body") or {}
    params = body.get("params") or {}
    meta = params.get("_meta") or {}
    return (ex["method"], body.get("method"), params.get("name"), orjson.dumps(params.get("arguments")),
            meta.get("idempotencyKey"), ex["headers"].get("idempotency-key"))  # fmt: skip


class Replay(httpx2.AsyncBaseTransport):
    """Answers each request with the next recorded answer, after checking it is the recorded request."""

    def __init__(self, exchanges: list[Exchange]) -> None:
        self.todo = list(exchanges)
        self.sent: list[Exchange] = []

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        body = await request.aread()
        sent: Exchange = {
            "method": request.method,
            "headers": {k.lower(): v for k, v in request.headers.items()},
            "body": orjson.loads(body) if body else None,
        }
        self.sent.append(sent)
        assert self.todo, f"a request the recorded run did not send: {sent}"
        ex = self.todo.pop(0)
        assert shape(sent) == shape(ex), (shape(sent), shape(ex))
        answer = ex["answer"].encode()
        if (
            sent["body"] is not None
            and "id" in sent["body"]
            and ex["contentType"].startswith("application/json")
        ):
            answer = _with_id(answer, sent["body"]["id"])
        return httpx2.Response(ex["status"], headers={"content-type": ex["contentType"]}, content=answer)


def _with_id(answer: bytes, rid: Any) -> bytes:
    """The recorded JSON answer under the id of the request it answers now."""
    doc = orjson.loads(answer)
    if isinstance(doc, dict) and "id" in doc:
        doc["id"] = rid
    return orjson.dumps(doc)
