"""Agents kept through the API, with the API and worker processes on a real Redis: a new version
reaches the workers with no restart while runs of the old one are in flight, every run names one
version from its start to its end (a worker SIGKILLed mid-run included), a ramp splits new runs by
run id, a rollback takes effect at once, another tenant sees nothing, and a tenant's profile with a
provider URL of its own is refused."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from redis.asyncio import Redis

from producer.agent_choice import in_ramp
from shared import keys
from shared.fields import RunField as F
from tests.integration.api_support import A, B, api, key, settings
from tests.support.postgres_server import PostgresServer, binaries
from tests.support.procs import WorkerProc, workers
from tests.support.waits import until

PART = keys.Partition(0, 1)
FAST = {"AGENTMILL_LEASE_MS": "2000", "AGENTMILL_HEARTBEAT_MS": "300", "AGENTMILL_RECONCILE_MS": "300",
        "AGENTMILL_TENANT_MAX_RUNNING": "0"}  # fmt: skip
HOLD_MS = 10_000  # how long a run of v1 streams its answer: past the kill, on a loaded machine too


def agent(prompt: str, name: str = "support", **kw: Any) -> dict[str, Any]:
    return {
        "name": name,
        "provider": {"connection": "scripted"},
        "systemPrompt": prompt,
        "tools": ["echo"],
        **kw,
    }


def run(delay_ms: int = 0, **kw: Any) -> dict[str, Any]:
    """A run of the agent whose one model turn answers with what the model was given (its system
    prompt names the version), streamed over ``delay_ms``."""
    turn = {"echoContext": True, "delayMs": delay_ms}
    return {"agent": "support", "inputMessages": [{"role": "user", "content": "hi"}],
            "runtimeHints": {"script": [turn]}, **kw}  # fmt: skip


@pytest.fixture
async def client(redis_url: str) -> AsyncIterator[httpx.AsyncClient]:
    async with api(settings(redis_url)) as url, httpx.AsyncClient(base_url=url, headers=A, timeout=30) as c:
        yield c


async def submit(c: httpx.AsyncClient, body: dict[str, Any]) -> str:
    r = await c.post("/v1/runs", json=body)
    assert r.status_code == 202, r.text
    return str(r.json()["runId"])


async def ended(c: httpx.AsyncClient, run_id: str, within: float = 30.0) -> dict[str, Any]:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        view = (await c.get(f"/v1/runs/{run_id}")).json()
        if view["status"] in ("completed", "failed", "aborted"):
            return dict(view)
        await asyncio.sleep(0.05)
    raise AssertionError(f"run {run_id} did not end within {within} s: {view}")


async def all_running(redis: Redis, run_ids: list[str]) -> bool:
    got = await asyncio.gather(*(redis.hget(PART.run(key(rid)), F.STATUS) for rid in run_ids))
    return all(s == b"running" for s in got)


async def mid_answer(redis: Redis, run_ids: list[str]) -> list[str]:
    """The owners of those of the runs mid-answer: running, with part of the model's answer
    published (an event past the run's first, its running status)."""
    got = await asyncio.gather(
        *(redis.hmget(PART.run(key(rid)), [F.STATUS, F.OWNER, F.LAST_SEQ]) for rid in run_ids)
    )
    return [o.decode() for status, o, seq in got if status == b"running" and o and int(seq or 0) > 1]


async def events(c: httpx.AsyncClient, run_id: str) -> list[dict[str, Any]]:
    page = (await c.get(f"/v1/runs/{run_id}/events", params={"format": "json", "limit": 1000})).json()
    return list(page["events"])


async def statuses(c: httpx.AsyncClient, run_id: str) -> list[dict[str, Any]]:
    return [e["payload"] for e in await events(c, run_id) if e["kind"] == "status"]


async def versions_named(c: httpx.AsyncClient, run_id: str) -> set[int]:
    """The agent versions the run's events name (its opening and its closing status events)."""
    return {p["agentVersion"] for p in await statuses(c, run_id) if "agentVersion" in p}


def prompt_of(view: dict[str, Any]) -> str:
    """The system prompt the model was given (the echoed context)."""
    echoed = orjson.loads(view["result"]["finalAssistantMessage"]["content"])
    return str(echoed["messages"][0]["content"])


async def started_with(c: httpx.AsyncClient, run_id: str, within: float = 30.0) -> int:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        found = await versions_named(c, run_id)
        if found:
            assert len(found) == 1, found
            return found.pop()
        await asyncio.sleep(0.02)
    raise AssertionError(f"run {run_id} did not start within {within} s")


@pytest.mark.parametrize(
    "in_flight", [pytest.param(12, id="12"), pytest.param(200, id="200", marks=pytest.mark.slow)]
)
async def test_a_new_version_reaches_running_workers_and_each_run_keeps_its_own(
    client: httpx.AsyncClient, redis: Redis, redis_url: str, in_flight: int
) -> None:
    c = client
    procs = {w: WorkerProc(redis_url, env={**FAST, "AGENTMILL_WORKER_ID": w}).start() for w in ("w1", "w2")}
    try:
        r = await c.post("/v1/agents", json=agent("You are support v1."))
        assert r.status_code == 201, r.text
        assert r.json()["version"] == 1

        async def both_up() -> bool:
            return int(await redis.zcard(PART.workers)) == 2

        await until("both workers up", both_up, within=60)
        # half of them first, the rest once both workers run some: each worker holds runs of v1.
        # They stream for long enough to be mid-answer still at the kill, after v2's own checks (4 s
        # was not: under load those checks alone took longer and no run was left to resume).
        old: list[str] = []
        for half in (in_flight // 2, in_flight - in_flight // 2):
            got = await c.post(
                "/v1/runs/batch",
                json={"runs": [run(delay_ms=HOLD_MS if in_flight <= 12 else 15_000) for _ in range(half)]},
            )
            old += [r["runId"] for r in got.json()["results"]]  # in flight while v2 arrives

            ids = list(old)
            await until(
                "the runs of v1 running", lambda ids=ids: all_running(redis, ids), within=60, every=0.05
            )
        r = await c.post("/v1/agents", json=agent("You are support v2."))
        assert r.json()["version"] == 2
        at_ms = time.time() * 1000
        new = await submit(c, run())
        assert await started_with(c, new) == 2
        began = min(e["ts"] for e in await events(c, new) if e["payload"].get("status") == "running")
        assert began - at_ms < 1_000  # a running worker ran it on v2 within 1 s: no restart, no poll

        # The set-up's premise: the victim holds runs cut off mid-answer by its kill (a run not yet
        # streaming at the kill starts afresh; one that ended before it has nothing to resume).
        await until("runs of v1 mid-answer", lambda: mid_answer(redis, old), within=30, every=0.02)
        held = await mid_answer(redis, old)
        victim = max(procs, key=lambda w: sum(o.startswith(w) for o in held))
        assert sum(o.startswith(victim) for o in held) > 0, ("no run of v1 left mid-answer", held)
        procs[victim].kill()  # mid-run: its runs resume on the other worker, on their version

        resumed = 0
        for rid in [*old, new]:
            view = await ended(c, rid)
            resumed += any(p["status"] == "model_call_restarted" for p in await statuses(c, rid))
            want = 1 if rid in old else 2
            assert view["status"] == "completed", view
            assert view["agentVersion"] == want
            assert await versions_named(c, rid) == {want}  # from its start to its end
            assert f"You are support v{want}." in prompt_of(view)
        assert resumed >= 1  # runs the killed worker held resumed on the other one, on their version

        # roll back: the next run gets version 1 at once
        r = await c.post("/v1/agents/support/current", json={"version": 1})
        assert r.status_code == 200 and r.json()["currentVersion"] == 1, r.text
        at_ms = time.time() * 1000
        back = await submit(c, run())
        assert await started_with(c, back) == 1
        began = min(e["ts"] for e in await events(c, back) if e["payload"].get("status") == "running")
        assert began - at_ms < 1_000
        # asked for by number; a retry and a fork keep their run's version, a fork may name another
        failing = {"runtimeHints": {"script": [{"error": {"status": 400, "message": "no"}}]}}
        pinned = await submit(c, run(agent="support@2", **failing))
        assert (await ended(c, pinned))["agentVersion"] == 2
        retry = (await c.post(f"/v1/runs/{pinned}/retry")).json()["runId"]
        assert (await ended(c, retry))["agentVersion"] == 2
        fork = (await c.post(f"/v1/runs/{pinned}/fork", json={"atSeq": 0})).json()["runId"]
        assert (await ended(c, fork))["agentVersion"] == 2
        other = (await c.post(f"/v1/runs/{pinned}/fork", json={"atSeq": 0, "agent": "support@1"})).json()
        assert (await ended(c, other["runId"]))["agentVersion"] == 1
        r = await c.post(f"/v1/runs/{pinned}/fork", json={"atSeq": 0, "agent": "nobody-has-it"})
        assert r.status_code == 404 and r.json()["error"]["code"] == "unknown_agent", r.text  # as on submit
    finally:
        for p in procs.values():
            p.stop()


async def test_a_ramp_splits_new_runs_by_run_id(client: httpx.AsyncClient, redis_url: str) -> None:
    c = client
    await c.post("/v1/agents", json=agent("v1"))
    await c.post("/v1/agents", json=agent("v2"), params={"current": "false"})
    assert (await c.get("/v1/agents/support")).json()["currentVersion"] == 1
    r = await c.post("/v1/agents/support/current", json={"ramp": {"version": 2, "percent": 30}})
    assert r.json()["ramp"] == {"version": 2, "percent": 30.0}, r.text
    ids = [f"ramp-{i}" for i in range(60)]
    got = await c.post("/v1/runs/batch", json={"runs": [run(runId=i) for i in ids]})
    assert got.status_code in (200, 202), got.text
    for rid in ids:
        view = (await c.get(f"/v1/runs/{rid}")).json()
        assert view["agentVersion"] == (2 if in_ramp("support", rid, 30) else 1), (rid, view)
    assert 5 <= sum(in_ramp("support", rid, 30) for rid in ids) <= 30
    # a version the agent does not have refuses its item only
    got = await c.post(
        "/v1/runs/batch", json={"runs": [run(runId="fine"), run(runId="nine", agent="support@9")]}
    )
    fine, nine = got.json()["results"]
    assert fine.get("error") is None and nine["error"]["code"] == "unknown_version", got.text
    # the ramp ended: every new run on the current version
    await c.post("/v1/agents/support/current", json={"ramp": None})
    rid = await submit(c, run(runId=next(i for i in ids if in_ramp("support", i, 30)) + "-after"))
    assert (await c.get(f"/v1/runs/{rid}")).json()["agentVersion"] == 1


async def test_another_tenant_sees_no_agent_and_a_tenant_names_no_url(client: httpx.AsyncClient) -> None:
    c = client
    assert (await c.post("/v1/agents", json=agent("mine"))).status_code == 201
    other = {"headers": B}
    assert (await c.get("/v1/agents/support", **other)).status_code == 404  # type: ignore[arg-type]
    assert (await c.get("/v1/agents/support/versions/1", **other)).status_code == 404  # type: ignore[arg-type]
    r = await c.post("/v1/agents/support/current", json={"version": 1}, **other)  # type: ignore[arg-type]
    assert r.status_code == 404
    assert (await c.delete("/v1/agents/support", **other)).status_code == 404  # type: ignore[arg-type]
    r = await c.post("/v1/runs", json=run(), **other)  # type: ignore[arg-type]
    assert r.status_code == 404 and r.json()["error"]["code"] == "unknown_agent", r.text
    unknown = await c.post("/v1/runs", json=run(agent="nobody-has-it"), **other)  # type: ignore[arg-type]
    assert unknown.status_code == 404  # the same answer as for another tenant's: it reveals neither
    assert r.json()["error"]["message"].replace("support", "X") == unknown.json()["error"]["message"].replace(
        "nobody-has-it", "X"
    )
    r = await c.post("/v1/runs", json=run(agent="no spaces!"), **other)  # type: ignore[arg-type]
    assert r.status_code == 422 and r.json()["error"]["field"] == "agent", r.text  # malformed: 422
    r = await c.post("/v1/runs/batch", json={"runs": [run()]}, **other)  # type: ignore[arg-type]
    assert r.json()["results"][0]["error"]["code"] == "unknown_agent", r.text
    listed = (await c.get("/v1/agents", **other)).json()["agents"]  # type: ignore[arg-type]
    assert [a["name"] for a in listed if a["source"] == "tenant"] == []
    assert {"default", "scripted"} <= {a["name"] for a in listed if a["source"] == "operator"}

    url = agent("x", provider={"connection": "scripted", "baseUrl": "https://api.example.com/v1"})
    r = await c.post("/v1/agents", json=url)
    assert r.status_code == 422 and r.json()["error"]["field"] == "provider.baseUrl", r.text
    r = await c.post("/v1/agents", json=agent("x", provider={"kind": "openai", "baseUrl": "http://x"}))
    assert r.status_code == 422 and r.json()["error"]["field"].startswith("provider."), r.text
    hook = agent("x", httpTools=[{"name": "t", "url": "http://127.0.0.1:9/x"}])
    r = await c.post("/v1/agents", json=hook)
    assert r.status_code == 422 and r.json()["error"]["field"] == "httpTools.0.url", r.text
    env = agent(
        "x", mcpServers=[{"name": "m", "url": "https://mcp.example.com", "headers": {"A": "env:KEY"}}]
    )
    r = await c.post("/v1/agents", json=env)
    assert r.status_code == 422 and r.json()["error"]["field"] == "mcpServers.0.headers.A", r.text
    r = await c.post("/v1/agents", json=agent("x", name="default"))
    assert r.status_code == 422 and r.json()["error"]["field"] == "name", r.text

    # a schedule's template may name it (each firing gets the version current then); not another's
    sched = {
        "scheduleId": "nightly",
        "cron": "0 3 * * *",
        "input": {k: v for k, v in run().items() if k != "runtimeHints"},
    }
    r = await c.post("/v1/schedules", json=sched)
    assert r.status_code == 201, r.text
    r = await c.post("/v1/schedules", json=sched, **other)  # type: ignore[arg-type]
    assert r.status_code == 404 and r.json()["error"]["field"] == "input.agent", r.text

    # deleted: no new runs; the operator's profiles are read-only
    assert (await c.delete("/v1/agents/support")).status_code == 200
    r = await c.post("/v1/runs", json=run())
    assert r.status_code == 404 and r.json()["error"]["code"] == "unknown_agent", r.text
    assert (await c.get("/v1/agents/support")).status_code == 404
    assert (await c.delete("/v1/agents/default")).status_code == 409
    view = (await c.get("/v1/agents/default")).json()
    assert view["source"] == "operator" and "baseUrl" not in view["profile"]["provider"]
    # created again: the numbering goes on
    assert (await c.post("/v1/agents", json=agent("again"))).json()["version"] == 2


@pytest.mark.skipif(binaries() is None, reason="no PostgreSQL binaries (initdb, pg_ctl) installed")
async def test_the_archive_row_keeps_the_version(redis_url: str, redis: Redis, tmp_path: Path) -> None:
    part = PART
    with PostgresServer() as pg:
        s = settings(redis_url, archive_url=pg.url, live_retention_s=0)
        env = {
            "AGENTMILL_ARCHIVE_URL": pg.url,
            "AGENTMILL_LIVE_RETENTION_S": "0",
            "AGENTMILL_ARCHIVE_POLL_MS": "100",
        }
        async with api(s) as base, httpx.AsyncClient(base_url=base, headers=A, timeout=30) as c:
            with workers(redis_url, 1, env=env, log_dir=tmp_path):
                await c.post("/v1/agents", json=agent("v1"))
                await c.post("/v1/agents", json=agent("v2"))
                rid = await submit(c, run(agent="support@1"))
                assert (await ended(c, rid))["agentVersion"] == 1

                async def gone() -> bool:
                    return not await redis.exists(part.run(key(rid)))

                await until("the run archived and gone from Redis", gone, within=30)
            view = (await c.get(f"/v1/runs/{rid}")).json()
            assert (view["status"], view["agentVersion"]) == ("completed", 1), view
