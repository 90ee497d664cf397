"""HTTP tools and the SSRF guard against local servers."""

from __future__ import annotations

import ipaddress
from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from shared.netguard import BlockedAddressError, check_url, guarded_client
from shared.netguard_rules import forbidden
from shared.profiles import HttpToolConfig, ToolSettings
from tests.support.redis_server import free_port
from worker.tools.base import ToolContext, ToolError
from worker.tools.http import HttpTool

pytestmark = pytest.mark.integration


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[dict[str, str], dict[str, Any]]] = []
        self.fail_next = 0
        self.port = 0

    async def tool(self, request: Request) -> Response:
        self.calls.append((dict(request.headers), orjson.loads(await request.body())))
        if self.fail_next:
            self.fail_next -= 1
            return Response("busy", status_code=503)
        return JSONResponse({"ok": True, "big": "x" * 5000})

    async def redirect(self, request: Request) -> Response:
        return RedirectResponse("http://127.0.0.1:1/private", status_code=307)

    async def hop(self, request: Request) -> Response:
        """To /tool on the same port, under the host name the query names (another origin or not)."""
        return RedirectResponse(f"http://{request.query_params['host']}:{self.port}/tool", status_code=307)


@pytest.fixture
async def server() -> AsyncIterator[tuple[Recorder, int]]:
    import asyncio

    rec = Recorder()
    port = free_port()
    app = Starlette(
        routes=[
            Route("/tool", rec.tool, methods=["POST"]),
            Route("/redirect", rec.redirect, methods=["POST"]),
            Route("/hop", rec.hop, methods=["POST"]),
        ]
    )
    rec.port = port
    srv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error", lifespan="off"))
    task = asyncio.create_task(srv.serve())
    while not srv.started:
        await asyncio.sleep(0.01)
    yield rec, port
    srv.should_exit = True
    await task


def tool(
    port: int, path: str = "/tool", allow: list[str] | None = None, **cfg: Any
) -> tuple[HttpTool, httpx.AsyncClient]:
    client = guarded_client()
    config = HttpToolConfig(
        name="lookup", url=f"http://127.0.0.1:{port}{path}", allow_hosts=["127.0.0.1"] if allow is None else allow,
        parameters={"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"], "additionalProperties": False},
        headers={"X-Secret": "env:LOOKUP_SECRET"}, max_response_chars=100, **cfg,
    )  # fmt: skip
    return HttpTool(config, ToolSettings(timeout_s=5), client), client


CTX = ToolContext(
    run_id="run_1", session_id=None, tool_call_id="call_9", idempotency_key="run_1:call_9", attempt=1,
    fencing_token=3,
)  # fmt: skip


async def test_idempotency_key_body_and_secret_header(
    server: tuple[Recorder, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    rec, port = server
    monkeypatch.setenv("LOOKUP_SECRET", "s3cr3t")
    t, client = tool(port)
    async with client:
        out = await t({"q": "x"}, CTX)
    headers, body = rec.calls[0]
    assert headers["idempotency-key"] == "run_1:call_9" and headers["x-secret"] == "s3cr3t"
    assert headers["agentmill-fencing-token"] == "3"  # the run's epoch, beside the key
    assert body == {"runId": "run_1", "toolCallId": "call_9", "name": "lookup", "arguments": {"q": "x"}}
    assert len(out.content) <= 100 + len("…[truncated]") and out.content.endswith("…[truncated]")
    assert "s3cr3t" not in repr(t)


async def test_schema_invalid_arguments_never_reach_the_server(server: tuple[Recorder, int]) -> None:
    from agentmill_client.models import ToolCall
    from shared.profiles import AgentProfile
    from worker.tools.registry import ProfileTools

    rec, port = server
    async with guarded_client() as client:
        profile = AgentProfile(name="p", http_tools=[HttpToolConfig(
            name="lookup", url=f"http://127.0.0.1:{port}/tool", allow_hosts=["127.0.0.1"],
            parameters={"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]})])  # fmt: skip
        tools = ProfileTools(profile, client)
        res = await tools.execute(ToolCall(id="c1", name="lookup", arguments='{"q": 5}'), CTX)
        assert res.is_error and "q" in res.content
        res = await tools.execute(ToolCall(id="c2", name="lookup", arguments='{"nope": 1}'), CTX)
        assert res.is_error and "required" in res.content
        assert rec.calls == []
        res = await tools.execute(ToolCall(id="c3", name="lookup", arguments='{"q": "fine"}'), CTX)
        assert not res.is_error and len(rec.calls) == 1


async def test_5xx_is_retryable_and_retried_with_the_same_key(server: tuple[Recorder, int]) -> None:
    from agentmill_client.models import ToolCall
    from shared.profiles import AgentProfile
    from worker.tools.registry import ProfileTools

    rec, port = server
    rec.fail_next = 1
    async with guarded_client() as client:
        t, _ = tool(port)
        with pytest.raises(ToolError) as exc:
            await t({"q": "x"}, CTX)
        assert exc.value.retryable
        rec.fail_next = 2
        profile = AgentProfile(
            name="p",
            http_tools=[t.config],
            tool_settings={"lookup": ToolSettings(max_tries=3, retry_delay_ms=10)},
        )
        res = await ProfileTools(profile, client).execute(
            ToolCall(id="call_9", name="lookup", arguments='{"q": "x"}'), CTX
        )
    assert not res.is_error
    assert [h["idempotency-key"] for h, _ in rec.calls[1:]] == ["run_1:call_9"] * 3
    assert [h["agentmill-fencing-token"] for h, _ in rec.calls[1:]] == ["3"] * 3


async def test_private_addresses_are_refused_unless_allow_listed(server: tuple[Recorder, int]) -> None:
    rec, port = server
    t, client = tool(port, allow=[])
    async with client:
        with pytest.raises(ToolError, match="not a public address"):
            await t({"q": "x"}, CTX)
        assert rec.calls == []
        t2, c2 = tool(
            port, path="/redirect"
        )  # allow-listed host, but the redirect goes to another private place
        async with c2:
            t2.config = t2.config.model_copy(update={"allow_hosts": ["127.0.0.1"]})
    with pytest.raises(BlockedAddressError):
        await check_url("http://localhost:8080/x", allow_hosts=[])
    with pytest.raises(BlockedAddressError):
        await check_url("http://169.254.169.254/latest/meta-data", allow_hosts=[])
    with pytest.raises(BlockedAddressError):
        await check_url("file:///etc/passwd")
    await check_url("http://localhost:8080/x", allow_hosts=["localhost"])
    await check_url("https://8.8.8.8/")  # a public literal passes without any lookup


async def test_redirects_are_checked_hop_by_hop(server: tuple[Recorder, int]) -> None:
    from shared.netguard import guarded_request

    _, port = server
    async with guarded_client() as client:
        # The first hop is allow-listed by name; the redirect target is 127.0.0.1:1 by address, which is not.
        with pytest.raises(BlockedAddressError):
            await guarded_request(
                client, "POST", f"http://localhost:{port}/redirect", allow_hosts=["localhost"]
            )


@pytest.mark.parametrize(("target", "secret_kept"), [("localhost", True), ("127.0.0.1", False)])
async def test_secret_headers_do_not_follow_a_redirect_to_another_origin(
    server: tuple[Recorder, int], target: str, secret_kept: bool
) -> None:
    from shared.netguard import guarded_request

    rec, port = server
    headers = {"X-Secret": "s3cret", "Idempotency-Key": "run_1:call_9", "Content-Type": "application/json"}
    async with guarded_client() as client:
        resp = await guarded_request(
            client, "POST", f"http://localhost:{port}/hop?host={target}",
            allow_hosts=["localhost", "127.0.0.1"], content=b"{}", headers=headers,
        )  # fmt: skip
        await resp.aclose()
    assert resp.status_code == 200
    ((got, _),) = rec.calls
    assert got["idempotency-key"] == "run_1:call_9"
    assert ("x-secret" in got) is secret_kept


@pytest.mark.parametrize(
    "ip",
    [
        "127.0.0.1",
        "10.1.2.3",
        "172.16.0.1",
        "192.168.1.1",
        "169.254.169.254",
        "::1",
        "fd00:ec2::254",
        "fe80::1",
        "::ffff:10.0.0.1",
        "0.0.0.0",
        "224.0.0.1",
    ],
)
def test_forbidden_ranges(ip: str) -> None:
    assert forbidden(ipaddress.ip_address(ip))


@pytest.mark.parametrize("ip", ["8.8.8.8", "1.1.1.1", "2606:4700:4700::1111"])
def test_public_ranges(ip: str) -> None:
    assert not forbidden(ipaddress.ip_address(ip))
