"""Tools from an MCP server: a real server written by others (the ``mcp`` package's
MCPServer over streamable HTTP, tests/support/mcp_server.py, in its own process, counting calls per
Idempotency-Key) and runs on real workers: listing and calling, the key on the HTTP request and in
``_meta``, a SIGKILL mid-call, a recorded call never sent again, a server that is down,
``allowTools`` and ToolPolicy."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from redis.asyncio import Redis

from agentmill_client.models import ToolCall
from shared.netguard import guarded_client
from shared.profiles import AgentProfile, McpServerConfig
from tests.integration.helpers import (
    assert_clean_stream,
    metric_samples,
    producer_for,
    running_worker,
    stream,
    until_status,
    wait_all,
)
from tests.support import mcp_transcript as transcript
from tests.support.mcp_profiles import TOKEN, call, mcp_run, results
from tests.support.mcp_server import McpServerProc, calls, counts, mcp_server
from tests.support.procs import WorkerProc
from worker.tools.base import ToolContext
from worker.tools.registry import Toolbox

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

FAST = {"AGENTMILL_LEASE_MS": "2000", "AGENTMILL_HEARTBEAT_MS": "300", "AGENTMILL_RECONCILE_MS": "300"}


async def test_a_run_lists_and_calls_the_servers_tools(
    redis: Redis, redis_url: str, mcp_served: tuple[McpServerProc, str]
) -> None:
    srv, profiles = mcp_served
    p = producer_for(redis, redis_url, profiles=profiles)
    script = [
        {"toolCalls": [call("srv__add", a=2, b=3), call("srv__boom"), call("srv__picture")]},
        {"echoContext": True},
    ]
    async with running_worker(redis_url, profiles=profiles) as wp:
        rid = (await p.submit(mcp_run(script))).run_id  # type: ignore[union-attr]
        rec = (await wait_all(p, [rid], 60))[rid]
        metrics = metric_samples(wp.metrics.render().decode())
    seen = calls(srv.calls_file)
    assert rec.status.value == "completed", rec.result
    events = await stream(redis, rid)
    assert_clean_stream(events)
    got = results(events)
    assert got["srv__add"] == (False, "5")
    assert got["srv__boom"][0] is True and "boom" in got["srv__boom"][1]  # isError: an error result
    assert got["srv__picture"] == (False, "[image: image/png, 100 bytes]")
    offered = orjson.loads(rec.result.final_assistant_message.content)["tools"]  # type: ignore[union-attr]
    assert {"srv__add", "srv__slow", "srv__boom", "srv__picture", "srv__whoami"} <= set(offered)
    assert "srv__hidden" not in offered  # allowTools filters the listing
    ids = {e.payload["name"]: e.payload["toolCallId"] for e in events if e.kind == "tool_call"}
    for c in seen:  # the key on the HTTP request and in _meta, the fencing token, the env header
        assert c["key"] == c["metaKey"] == f"{rid}:{ids['srv__' + c['tool']]}"
        assert c["fencing"] == "1" and c["auth"] == f"Bearer {TOKEN}"
    assert sorted(c["tool"] for c in seen) == ["add", "boom", "picture"]
    assert metrics[("agentmill_mcp_calls_total", (("outcome", "ok"), ("server", "srv")))] == 2
    assert metrics[("agentmill_mcp_calls_total", (("outcome", "error"), ("server", "srv")))] == 1
    assert metrics[("agentmill_mcp_calls_total", (("outcome", "failed"), ("server", "srv")))] == 0


async def test_allow_tools_and_tool_policy_hold_by_the_exposed_names(
    redis: Redis, redis_url: str, mcp_served: tuple[McpServerProc, str]
) -> None:
    srv, profiles = mcp_served
    p = producer_for(redis, redis_url, profiles=profiles)
    narrowed = mcp_run(
        [{"toolCalls": [call("srv__add", a=1, b=1), call("srv__picture"), call("srv__hidden")]}],
        allowedTools=["srv__add"],
    )
    approval = mcp_run([{"toolCalls": [call("srv__whoami")]}])
    async with running_worker(redis_url, profiles=profiles):
        rid = (await p.submit(narrowed)).run_id  # type: ignore[union-attr]
        aid = (await p.submit(approval)).run_id  # type: ignore[union-attr]
        rec = (await wait_all(p, [rid], 60))[rid]
        await until_status(redis, aid, "awaiting_human", within=30)
    seen = calls(srv.calls_file)
    assert rec.status.value == "completed", rec.result
    got = results(await stream(redis, rid))
    assert got["srv__add"] == (False, "2")
    assert got["srv__picture"][0] and "not available" in got["srv__picture"][1]  # allowedTools
    assert got["srv__hidden"][0] and "not available" in got["srv__hidden"][1]  # allowTools
    waiting = [e for e in await stream(redis, aid) if e.kind == "status"][-1].payload
    assert [a["name"] for a in waiting["pendingApprovals"]] == ["srv__whoami"]  # requiresApproval
    assert [c["tool"] for c in seen] == ["add"]  # nothing else reached the server


async def test_a_server_that_is_down_gives_an_error_result_after_the_retries(
    redis: Redis, redis_url: str, mcp_served: tuple[McpServerProc, str]
) -> None:
    srv, profiles = mcp_served
    p = producer_for(redis, redis_url, profiles=profiles)
    async with running_worker(redis_url, profiles=profiles):
        first = (await p.submit(mcp_run([{"toolCalls": [call("srv__add", a=1, b=2)]}]))).run_id  # type: ignore[union-attr]
        await wait_all(p, [first], 60)  # the worker has the listing now
        srv.stop()
        rid = (await p.submit(mcp_run([{"toolCalls": [call("srv__add", a=3, b=4)]}]))).run_id  # type: ignore[union-attr]
        rec = (await wait_all(p, [rid], 60))[rid]
    assert rec.status.value == "completed", rec.result  # the model got the error and answered
    events = await stream(redis, rid)
    is_error, content = results(events)["srv__add"]
    assert is_error and "unreachable" in content and "after 3 attempts" in content, content
    assert sum(1 for e in events if e.kind == "error" and e.payload.get("code") == "tool_attempt_failed") == 2


async def test_sigkill_mid_call_sends_it_again_with_the_same_key_and_never_a_recorded_one(
    redis: Redis, redis_url: str, tmp_path: Path, mcp_served: tuple[McpServerProc, str]
) -> None:
    """The worker is SIGKILLed while srv__slow is at the server: the rescuer sends that call again
    with the same Idempotency-Key (the server counts two under it), never the recorded srv__add."""
    srv, profiles = mcp_served
    env = {**FAST, "AGENTMILL_PROFILES": profiles, "MCP_TEST_TOKEN": TOKEN}
    p = producer_for(redis, redis_url, profiles=profiles)
    script = [{"toolCalls": [call("srv__add", a=20, b=22)]}, {"toolCalls": [call("srv__slow", ms=2500)]},
              {"text": "done"}]  # fmt: skip
    rid = (await p.submit(mcp_run(script))).run_id  # type: ignore[union-attr]
    victim = WorkerProc(redis_url, env=env, log=tmp_path / "victim.log").start()
    try:
        deadline = time.monotonic() + 40
        while not any(c["tool"] == "slow" for c in calls(srv.calls_file)):
            assert time.monotonic() < deadline, "the slow call never reached the server"
            await asyncio.sleep(0.05)
    finally:
        victim.kill()  # the slow call is in flight: no result recorded
    rescuer = WorkerProc(redis_url, env=env).start()
    try:
        rec = (await wait_all(p, [rid], 60))[rid]
    finally:
        rescuer.stop()
    per_key = counts(srv.calls_file)
    seen = calls(srv.calls_file)
    assert rec.status.value == "completed", rec.result
    events = await stream(redis, rid)
    assert_clean_stream(events)
    ids = {e.payload["name"]: e.payload["toolCallId"] for e in events if e.kind == "tool_call"}
    assert per_key[f"{rid}:{ids['srv__add']}"] == 1  # recorded: never sent again
    assert per_key[f"{rid}:{ids['srv__slow']}"] == 2  # in flight at the kill: sent again, same key
    assert [c["metaKey"] for c in seen] == [c["key"] for c in seen]
    assert [c["fencing"] for c in seen if c["tool"] == "slow"] == ["1", "2"]  # the rescuer's epoch
    assert results(events)["srv__slow"] == (False, "waited 2500 ms")
    again = [e.payload for e in events if e.kind == "status" and e.payload.get("status") == "tool_reexecuted"]
    assert [a["name"] for a in again] == ["srv__slow"]


async def test_the_recorded_transcript_is_what_the_live_server_exchanges(tmp_path: Path) -> None:
    """tests/data/mcp/transcript.json (replayed in CI by tests/unit/test_mcp_replay.py) holds the
    requests the worker sends the live server now; AGENTMILL_RECORD=1 writes it anew."""
    with mcp_server(tmp_path) as srv:
        live = await transcript.record(srv.url)
    if os.environ.get("AGENTMILL_RECORD") == "1":
        transcript.save(live)
    assert [transcript.shape(e) for e in live] == [transcript.shape(e) for e in transcript.load()]
    assert [e["status"] for e in live] == [e["status"] for e in transcript.load()]


async def test_tools_list_changed_makes_the_workers_listing_stale_at_once(tmp_path: Path) -> None:
    """The server's tools/list_changed (a subscriptions/listen stream) is heard by the worker, which
    lists the tools again at the next run's start although the listing's TTL (an hour) is not over."""
    with mcp_server(tmp_path) as srv:
        http = guarded_client()
        box = Toolbox(http, watch=True)
        prof = AgentProfile(name="p", mcp_servers=[
            McpServerConfig(name="srv", url=srv.url, allow_hosts=["127.0.0.1"], tools_ttl_s=3600)])  # fmt: skip
        try:
            assert "srv__extra" not in await box.specs(prof)
            ctx = ToolContext("run_g", None, "c1.0", "run_g:c1.0", 1)
            res = await box.execute(prof, ToolCall(id="c1.0", name="srv__grow", arguments="{}"), ctx)
            assert res.content == "grown", res
            deadline = time.monotonic() + 20
            while "srv__extra" not in await box.specs(prof):
                assert time.monotonic() < deadline, "the worker did not hear tools/list_changed"
                await asyncio.sleep(0.1)
        finally:
            await box.aclose()
            await http.aclose()


def toolbox_for(srv_url: str, **server: Any) -> tuple[Toolbox, AgentProfile, Any]:
    http = guarded_client()
    cfg = McpServerConfig(name="srv", url=srv_url, **{"allow_hosts": ["127.0.0.1"], **server})
    return Toolbox(http), AgentProfile(name="p", mcp_servers=[cfg]), http


async def test_max_concurrent_bounds_the_calls_a_worker_has_at_a_server(tmp_path: Path) -> None:
    with mcp_server(tmp_path) as srv:
        box, prof, http = toolbox_for(srv.url, max_concurrent=1)
        try:
            await box.specs(prof)
            ctxs = [ToolContext("run_c", None, f"c1.{i}", f"run_c:c1.{i}", 1) for i in range(3)]
            res = await asyncio.gather(*(
                box.execute(prof, ToolCall(id=c.tool_call_id, name="srv__slow", arguments='{"ms": 300}'), c)
                for c in ctxs
            ))  # fmt: skip
        finally:
            await http.aclose()
        seen = calls(srv.calls_file)
    assert [r.content for r in res] == ["waited 300 ms"] * 3
    assert [c["inflight"] for c in seen] == [1, 1, 1]  # one at a time, never two at once


async def test_the_outbound_guard_refuses_a_server_on_a_private_address_unless_allow_listed(
    tmp_path: Path,
) -> None:
    with mcp_server(tmp_path) as srv:
        box, prof, http = toolbox_for(srv.url, allow_hosts=[])  # 127.0.0.1, not allow-listed
        try:
            assert await box.specs(prof) == {}  # the listing was refused: no tool offered
            ctx = ToolContext("run_b", None, "c1.0", "run_b:c1.0", 1)
            res = await box.execute(
                prof, ToolCall(id="c1.0", name="srv__add", arguments='{"a": 1, "b": 2}'), ctx
            )
        finally:
            await http.aclose()
        seen = calls(srv.calls_file)
    assert res.is_error and "refused" in res.content and "not a public address" in res.content, res
    assert seen == []  # nothing reached the server
