"""Client-executed tools through real worker processes, Redis, the API, the Python client and the
CLI: the wait frees the worker slot, survives a SIGKILL, resumes on another worker, times
out into an error result, and a repeated result is a no-op."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import orjson
import pytest
import uvicorn
from redis.asyncio import Redis

from agentmill_client.client import ApiError, AsyncClient
from agentmill_client.models import ClientToolResult
from app.api import create_app
from shared.settings import Settings
from tests.integration.helpers import (
    assert_clean_stream,
    metric_samples,
    producer_for,
    running_worker,
    script_run,
    stream,
    until_status,
    wait_all,
)
from tests.support import forkserver
from tests.support.procs import ROOT, WorkerProc
from tests.support.redis_server import free_port
from tests.support.schema import K
from worker.core.preamble import unframe

pytestmark = pytest.mark.integration

LOOKUP = {
    "name": "lookup",
    "description": "Look a customer up in the caller's CRM.",
    "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
}


def profiles(tmp_path: Path, timeout_ms: int = 600_000) -> str:
    profile = {"name": "crm", "provider": {"kind": "scripted", "mode": "script"}, "tools": ["echo", "sleep"],
               "clientTools": [LOOKUP], "runClientTools": ["browser_open"], "clientToolTimeoutMs": timeout_ms}  # fmt: skip
    path = tmp_path / "profiles.json"
    path.write_bytes(orjson.dumps({"profiles": [profile]}))
    return str(path)


def crm_run(script: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {**script_run(script), "agent": "crm", **extra}


def result(call_id: str, content: str, is_error: bool = False) -> ClientToolResult:
    return ClientToolResult(tool_call_id=call_id, content=content, is_error=is_error)


async def test_the_wait_frees_the_slot_survives_sigkill_and_resumes_on_another_worker(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    path = profiles(tmp_path)
    env = {"AGENTMILL_PROFILES": path, "AGENTMILL_MAX_JOBS": "1"}
    p = producer_for(redis, redis_url, profiles=path)
    mixed = {"toolCalls": [{"id": "k1", "name": "lookup", "arguments": {"q": "ACME"}},
                           {"id": "w1", "name": "echo", "arguments": {"text": "from the worker"}}]}  # fmt: skip
    first = WorkerProc(redis_url, env=env, log=tmp_path / "a.log").start()
    second: WorkerProc | None = None
    try:
        run = await p.submit(crm_run([mixed, {"echoContext": True}]))
        await until_status(redis, run.run_id, "awaiting_tools", within=20)
        calls = {
            e.payload["toolCallId"]: e.payload
            for e in await stream(redis, run.run_id)
            if e.kind == "tool_call"
        }
        assert calls["c1.0"]["execution"] == "client" and calls["c1.1"]["execution"] == "worker"
        rec = await p.get(run.run_id)
        assert rec is not None and [c["toolCallId"] for c in rec.pending_tool_calls] == ["c1.0"]
        # The waiting run holds no slot: another run completes on this max_jobs=1 worker meanwhile.
        other = await p.submit(script_run([{"text": "meanwhile"}]))
        assert (await wait_all(p, [other.run_id], 20))[other.run_id].status.value == "completed"
        first.kill()  # SIGKILL while the run waits: nothing of it lives in that process
        assert (await p.get(run.run_id)).status.value == "awaiting_tools"  # type: ignore[union-attr]
        assert await p.post_tool_results(run.run_id, [result("nope", "x")]) == ("unknown_call", "nope", [])
        assert (await p.post_tool_results(run.run_id, [result("c1.1", "x")]))[0] == "not_client"
        verdict, _, each = await p.post_tool_results(run.run_id, [result("c1.0", "ACME: 12 open orders")])
        assert (verdict, each) == ("resumed", ["recorded"])
        record = orjson.loads(await redis.hget(K.tools(run.run_id), "c1.0"))  # type: ignore[arg-type]
        assert record["state"] == "done" and record["calledAt"] == calls["c1.0"]["calledAt"] > 0
        # A repeat is a no-op; a different result for a recorded call is refused.
        assert await p.post_tool_results(run.run_id, [result("c1.0", "ACME: 12 open orders")]) == (
            "recorded", "", ["duplicate"]
        )  # fmt: skip
        assert (await p.post_tool_results(run.run_id, [result("c1.0", "other")]))[0] == "conflict"
        second = WorkerProc(redis_url, env=env, log=tmp_path / "b.log").start()
        done = (await wait_all(p, [run.run_id], 30))[run.run_id]
    finally:
        first.stop()
        if second is not None:
            second.stop()
    assert done.status.value == "completed"
    seen = orjson.loads(done.result.final_assistant_message.content)  # type: ignore[union-attr]
    tools = [(m["toolCallId"], unframe(m["content"])) for m in seen["messages"] if m["role"] == "tool"]
    assert tools == [
        ("c1.0", "ACME: 12 open orders"),
        ("c1.1", "from the worker"),
    ]  # in the model's call order
    assert "lookup" in seen["tools"]
    events = await stream(redis, run.run_id)
    assert_clean_stream(events)
    assert [e.payload["status"] for e in events if e.kind == "status"].count("awaiting_tools") == 1
    assert sum(1 for e in events if e.kind == "tool_result" and e.payload["toolCallId"] == "c1.0") == 1
    assert (await p.post_tool_results(run.run_id, [result("c1.0", "late")]))[0] == "finished"


async def test_a_call_past_its_timeout_gives_the_model_an_error_and_abort_ends_a_wait(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    path = profiles(tmp_path, timeout_ms=300)
    p = producer_for(redis, redis_url, profiles=path)
    ask = {"toolCalls": [{"id": "t1", "name": "lookup", "arguments": {"q": "slow"}}]}
    async with running_worker(redis_url, profiles=path, reconcile_ms=100) as wp:
        slow = await p.submit(crm_run([ask, {"echoContext": True}]))
        done = (await wait_all(p, [slow.run_id], 20))[slow.run_id]
        parked = metric_samples(wp.metrics.render().decode())
        key = (("state", "awaiting_tools"),)  # the time parked on no worker counts too
        assert parked[("agentmill_state_duration_seconds_count", key)] == 1
        assert parked[("agentmill_state_duration_seconds_sum", key)] >= 0.3
        assert done.status.value == "completed"
        seen = orjson.loads(done.result.final_assistant_message.content)  # type: ignore[union-attr]
        assert (
            unframe(seen["messages"][-1]["content"]) == "error: the client returned no result within 300 ms"
        )
        events = await stream(redis, slow.run_id)
        res = next(e.payload for e in events if e.kind == "tool_result")
        assert res["isError"] and res["toolCallId"] == "c1.0"
        assert any(e.kind == "error" and e.payload["code"] == "client_tool_error" for e in events)
        assert (await p.post_tool_results(slow.run_id, [result("c1.0", "too late")]))[0] == "timed_out"

        waiting = await p.submit(crm_run([{**ask, "toolCalls": [{**ask["toolCalls"][0], "id": "t2"}]}]))  # type: ignore[dict-item]
        await until_status(redis, waiting.run_id, "awaiting_tools")
        assert await p.abort(waiting.run_id) == "aborted"
        events = await stream(redis, waiting.run_id)
        assert_clean_stream(events)
        assert events[-1].payload["status"] == "aborted"


async def test_run_declared_client_tools_the_api_the_client_and_the_cli(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    path = profiles(tmp_path)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(
        create_app(Settings(redis_url=redis_url, auth_disabled=True, profiles=path)),
        host="127.0.0.1", port=port, log_level="error"))  # fmt: skip
    task = asyncio.create_task(server.serve())
    browser = {"name": "browser_open", "parameters": {"type": "object"}, "execution": "client"}
    calls = {"toolCalls": [{"id": "b1", "name": "browser_open", "arguments": {}},
                           {"id": "b2", "name": "browser_open", "arguments": {}}]}  # fmt: skip
    try:
        while not server.started:
            await asyncio.sleep(0.01)
        async with AsyncClient(f"http://127.0.0.1:{port}") as c, running_worker(redis_url, profiles=path):
            with pytest.raises(ApiError) as exc:  # outside the profile's allow-list
                await c.submit(crm_run([], clientTools=[{**browser, "name": "shell"}]))
            assert exc.value.status == 422 and exc.value.code == "client_tool_not_allowed"
            items = await c.submit_batch([crm_run([], clientTools=[{**browser, "name": "shell"}])])
            assert (
                items[0].error is not None and items[0].error.code == "client_tool_not_allowed"
            )  # batch too
            with pytest.raises(ApiError) as exc:
                await c.submit(crm_run([], clientTools=[{**browser, "parameters": {"type": 5}}]))
            assert exc.value.status == 422
            run_id = (await c.submit(crm_run([calls, {"text": "opened both"}], clientTools=[browser]))).run_id
            await until_status(redis, run_id, "awaiting_tools")
            view = await c.get(run_id)
            assert view.status == "awaiting_tools" and len(view.pending_tool_calls or []) == 2
            listed = await c.list_runs(status="awaiting_tools")  # the listing indexes follow the status
            assert [r.run_id for r in listed.runs] == [run_id]
            with pytest.raises(ApiError) as exc:
                await c.tool_result(run_id, "zz", "x")
            assert (exc.value.status, exc.value.code) == (404, "unknown_tool_call")
            with pytest.raises(ApiError) as exc:
                await c.tool_result("no-such-run", "c1.0", "x")
            assert exc.value.status == 404
            answer = await c.tool_result(run_id, "c1.0", "page one")
            assert not answer.resumed and answer.results[0].result == "recorded"
            assert len((await c.get(run_id)).pending_tool_calls or []) == 1
            with pytest.raises(ApiError) as exc:
                await c.tool_result(run_id, "c1.0", "a different page")
            assert (exc.value.status, exc.value.code) == (409, "conflict")
            env = {**os.environ, "REDIS_URL": redis_url, "AGENTMILL_PROFILES": path}
            out = await asyncio.to_thread(
                forkserver.run, ["-m", "app.cli", "tool-result", run_id, "c1.1", "--content", "page two", "--error"],
                cwd=ROOT, env=env, timeout=60,
            )  # fmt: skip
            assert out.returncode == 0 and "resumed" in out.stdout, out.stdout + out.stderr
            again = await c.tool_result(run_id, "c1.0", "page one")  # before or after the run ends:
            assert again.results[0].result == "duplicate"  # a repeat is a no-op
            done = await c.wait(run_id, timeout=20)
            assert (await c.tool_result(run_id, "c1.1", "page two", is_error=True)).results[
                0
            ].result == "duplicate"
            with pytest.raises(ApiError) as exc:
                await c.tool_result(run_id, "c1.1", "changed after the end")
            assert (exc.value.status, exc.value.code) == (409, "run_finished")
        assert done.status == "completed"
        results = {
            e.payload["toolCallId"]: e.payload for e in await stream(redis, run_id) if e.kind == "tool_result"
        }
        assert results["c1.0"]["content"] == "page one" and not results["c1.0"]["isError"]
        assert results["c1.1"]["content"] == "page two" and results["c1.1"]["isError"]
    finally:
        server.should_exit = True
        await task
