"""Content that need not be stored (RunInput.storeContent false, or its profile's storeContent): the
run works as usual with a real worker, and once it ended no Redis key holds its messages or tool
content (a marker sent as input and returned as a tool result), its result says contentRedacted and
keeps its usage, its events still read, and a session keeps no turn of it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from redis.asyncio import Redis

from tests.integration.api_support import A, api, settings, until_run
from tests.integration.test_deletion import archive_count, archive_traces, key_of, redis_traces
from tests.support.postgres_server import PostgresServer, binaries
from tests.support.procs import WorkerProc
from tests.support.waits import until

pytestmark = pytest.mark.integration

MARK = "qv-secret-5521"


def profiles(tmp_path: Path) -> str:
    scripted = {"kind": "scripted", "mode": "script"}
    helper = {"name": "helper", "tools": ["echo"], "provider": {**scripted, "script": [
        {"toolCalls": [{"name": "echo", "arguments": {"text": f"child {MARK}"}}]}, {"echoContext": True}]}}  # fmt: skip
    hush = {**helper, "name": "hush", "storeContent": False}
    loud = {"name": "loud", "provider": scripted, "tools": ["echo"],
            "agentTools": [{"agent": "helper", "name": "ask_helper", "description": "a helper"},
                           {"agent": "hush", "name": "ask_hush", "description": "a discreet helper"}]}  # fmt: skip
    quiet = {"name": "quiet", "provider": scripted, "tools": ["echo"], "storeContent": False}
    path = tmp_path / "profiles.json"
    path.write_bytes(orjson.dumps({"profiles": [loud, quiet, helper, hush]}))
    return str(path)


def run(agent: str, run_id: str, **extra: Any) -> dict[str, Any]:
    script = [{"toolCalls": [{"name": "echo", "arguments": {"text": MARK}}]}, {"text": f"the answer {MARK}"}]
    if agent == "loud" and extra.get("storeContent") is False:  # and a sub-agent, which stores none either
        script.insert(1, {"toolCalls": [{"name": "ask_helper", "arguments": {"task": f"help {MARK}"}}]})
    return {"agent": agent, "runId": run_id, "inputMessages": [{"role": "user", "content": f"tell {MARK}"}],
            "runtimeHints": {"script": script}, **extra}  # fmt: skip


async def test_a_run_that_stores_no_content_keeps_none_once_it_ended(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    path = profiles(tmp_path)
    w = WorkerProc(redis_url, env={"AGENTMILL_PROFILES": path}, log=tmp_path / "w.log").start()
    try:
        async with (
            api(settings(redis_url, profiles=path)) as base,
            httpx.AsyncClient(base_url=base, headers=A, timeout=30) as c,
        ):
            # by the input, in a session; by the profile's default
            for body in (run("loud", "r-input", storeContent=False, sessionId="sq", autoCreateSession=True),
                         run("quiet", "r-profile")):  # fmt: skip
                r = await c.post("/v1/runs", json=body)
                assert r.status_code == 202, r.text
            for rid in ("r-input", "r-profile"):
                view = await until_run(c, rid, lambda v: v["status"] == "completed", within=30)
                result = view["result"]
                if rid == "r-input":
                    assert view["children"], view  # its sub-agent ran, and stored no content either
                assert result["contentRedacted"] is True, result
                assert result["usage"] and result["usage"]["outputTokens"] > 0, result
                assert result.get("finalAssistantMessage") is None, result
                events = (await c.get(f"/v1/runs/{rid}/events", params={"format": "json"})).json()["events"]
                kinds = [e["kind"] for e in events]
                assert "tool_result" in kinds and kinds[-1] == "status", kinds
                assert all(e["payload"].get("contentRedacted") for e in events if e["kind"] == "tool_result")
            assert await redis_traces(redis, [MARK]) == []
            session = (await c.get("/v1/sessions/sq")).json()
            assert session["runs"] == ["r-input"] and session["history"] == [], session  # no turn kept
            # a run that stores its content, beside them, still does; its sub-agent whose profile stores
            # none does not
            body = run("loud", "r-kept")
            body["runtimeHints"]["script"].insert(
                1, {"toolCalls": [{"name": "ask_hush", "arguments": {"task": "shh"}}]}
            )
            r = await c.post("/v1/runs", json=body)
            view = await until_run(c, "r-kept", lambda v: v["status"] == "completed", within=30)
            assert MARK in str(view["result"]) and not view["result"].get("contentRedacted")
            child = (await c.get(f"/v1/runs/{view['children'][0]['runId']}")).json()
            assert child["result"]["contentRedacted"] is True, child
    finally:
        w.stop()


@pytest.mark.skipif(binaries() is None, reason="no PostgreSQL binaries (initdb, pg_ctl) installed")
async def test_the_archive_of_a_run_that_stores_no_content_holds_none(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    path = profiles(tmp_path)
    pg = PostgresServer()
    pg.start()
    env = {"AGENTMILL_PROFILES": path, "AGENTMILL_ARCHIVE_URL": pg.url, "AGENTMILL_ARCHIVE_POLL_MS": "100"}
    w = WorkerProc(redis_url, env=env, log=tmp_path / "w.log").start()
    try:
        async with (
            api(settings(redis_url, profiles=path, archive_url=pg.url)) as base,
            httpx.AsyncClient(base_url=base, headers=A, timeout=30) as c,
        ):
            r = await c.post("/v1/runs", json=run("quiet", "r-arch"))
            assert r.status_code == 202, r.text
            await until_run(c, "r-arch", lambda v: v["status"] == "completed", within=30)
            await until("archived", lambda: archive_count(pg.url, [key_of("r-arch")]), 20)
            assert await archive_traces(pg.url, [MARK]) == []
            events = (await c.get("/v1/runs/r-arch/events", params={"format": "json"})).json()["events"]
            assert events and all(MARK not in str(e) for e in events)
    finally:
        w.stop()
        pg.stop()
