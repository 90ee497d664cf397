"""Sub-agents inside their tenant's quotas, through real worker processes and Redis: a tenant's trees
of runs never have more runs running (or not ended) than its maxActive, parked parents and their
children included, and all of them end; one tenant's children cannot fill the pool's queue against
another tenant; maxChildren and maxDescendants fail the agent tool call with a message naming the cap
while the parent carries on and answers."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import orjson
import pytest
from redis.asyncio import Redis

from agentmill_client.statuses import TERMINAL
from tests.integration.api_support import A, B, api
from tests.integration.api_support import settings as api_settings
from tests.integration.helpers import producer_for, stream, wait_all
from tests.integration.test_subagents import ask, boss_run, profiles, tool_messages
from tests.support.procs import WorkerProc
from tests.support.schema import K

pytestmark = pytest.mark.integration

SECRET = "child-quotas-secret"  # the ids of a named tenant's runs (every API and worker process)


async def tenant_runs(redis: Redis, tenant: str) -> list[str]:
    """The statuses of every run hash of the tenant (roots and children)."""
    ids = [k async for k in redis.scan_iter(match=K.run("*"), count=1000)]
    async with redis.pipeline(transaction=False) as pipe:
        for k in ids:
            pipe.hmget(k, ["status", "tenant"])
        rows = await pipe.execute()
    return [(s or b"").decode() for s, t in rows if (t or b"").decode() == tenant]


@contextlib.asynccontextmanager
async def sampling(redis: Redis, tenant: str) -> AsyncIterator[dict[str, int]]:
    """Samples the tenant's runs every 20 ms while the block runs: the most running and not ended."""
    most = {"running": 0, "active": 0, "samples": 0}

    async def sample() -> None:
        while True:
            statuses = await tenant_runs(redis, tenant)
            most["running"] = max(most["running"], statuses.count("running"))
            most["active"] = max(most["active"], sum(1 for s in statuses if s and s not in TERMINAL))
            most["samples"] += 1
            await asyncio.sleep(0.02)

    task = asyncio.create_task(sample())
    try:
        yield most
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def middles_that_work_first(path: str, ms: int) -> str:
    """The profiles of `path` with each middle sleeping `ms` before it asks its helper: the tree then
    holds the tenant's quota for that long, where middles that asked at once were refused, answered
    and ended within a fraction of a second (the quota in use for a sample or two)."""
    doc = orjson.loads(Path(path).read_bytes())
    (middle,) = [p for p in doc["profiles"] if p["name"] == "middle"]
    middle["tools"] = ["sleep"]
    middle["provider"]["script"].insert(0, {"toolCalls": [{"name": "sleep", "arguments": {"ms": ms}}]})
    Path(path).write_bytes(orjson.dumps(doc))
    return path


def refusals(content: str) -> list[str]:
    return [c for _, c in tool_messages(content) if c.startswith("error: sub-agent refused")]


async def test_a_tenants_nested_children_stay_within_its_max_active_and_all_end(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    """maxActive 4; two roots each start three middles, each of which starts a helper: 14 runs if
    nothing bounded them. Running, parked or queued, the tenant's runs never pass 4; all end."""
    path = middles_that_work_first(profiles(tmp_path, child_sleep_ms=400), ms=800)
    quotas = orjson.dumps({"tenant-a": {"maxActive": 4}}).decode()
    env = {"AGENTMILL_PROFILES": path, "AGENTMILL_TENANT_QUOTAS": quotas, "AGENTMILL_ID_SECRET": SECRET}
    procs = [WorkerProc(redis_url, env=env, log=tmp_path / f"w{i}.log").start() for i in range(2)]
    try:
        async with api(api_settings(redis_url, profiles=path, tenant_quotas=quotas, id_secret=SECRET)) as url, \
                httpx.AsyncClient(base_url=url, timeout=60) as http, sampling(redis, "tenant-a") as most:  # fmt: skip
            body = boss_run([ask("a", "b", "c", tool="ask_middle"), {"echoContext": True}])
            for n in ("r1", "r2"):
                r = await http.post("/v1/runs", headers=A, json={**body, "runId": n})
                assert r.status_code == 202, r.text
            done = [(await http.get(f"/v1/runs/{n}/wait", headers=A, params={"timeout": 50})).json()
                    for n in ("r1", "r2")]  # fmt: skip
            for _ in range(200):  # the children the roots answered without end too
                if all(s in TERMINAL for s in await tenant_runs(redis, "tenant-a")):
                    break
                await asyncio.sleep(0.05)
    finally:
        for w in procs:
            w.stop()
    assert most["samples"] > 20
    assert most["active"] <= 4 and most["running"] <= 4, most
    # The tenant did use its quota: its sampled peak (every 20 ms, so it may miss the instant at 4)
    # and, below, the refusals naming maxActive=4 that its roots heard.
    assert most["active"] >= 3, (most, done)
    assert [d["status"] for d in done] == ["completed", "completed"], done  # the parents answered
    said = [m for d in done for m in refusals(d["result"]["finalAssistantMessage"]["content"])]
    assert said and all("maxActive=4 reached" in m for m in said), said
    assert all(s in TERMINAL for s in await tenant_runs(redis, "tenant-a"))  # nothing left waiting


async def test_max_children_and_max_descendants_fail_the_call_with_the_cap_and_the_parent_answers(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    """maxChildren 3, maxDescendants 4: three middles fit, of their three helpers one; the boss's fourth
    child (a later round) is over maxChildren."""
    path = profiles(tmp_path, child_sleep_ms=50)
    quotas = orjson.dumps({"default": {"maxChildren": 3, "maxDescendants": 4}}).decode()
    p = producer_for(redis, redis_url, profiles=path, tenant_quotas=quotas)
    env = {"AGENTMILL_PROFILES": path, "AGENTMILL_TENANT_QUOTAS": quotas}
    w = WorkerProc(redis_url, env=env, log=tmp_path / "w.log").start()
    try:
        run = await p.submit(
            boss_run([ask("a", "b", "c", tool="ask_middle"), ask("d"), {"echoContext": True}])
        )
        rec = (await wait_all(p, [run.run_id], 60))[run.run_id]
        middles = [
            e.payload["childRunId"] for e in await stream(redis, run.run_id) if e.kind == "child_started"
        ]
        helpers = [e.payload["childRunId"] for m in middles for e in await stream(redis, m) if e.kind == "child_started"]  # fmt: skip
        mids = await wait_all(p, middles, 30)
    finally:
        w.stop()
    assert rec.status.value == "completed"
    assert len(middles) == 3 and len(helpers) == 1  # the tree: the root, 3 middles, 1 helper
    (said,) = refusals(rec.result.final_assistant_message.content)  # type: ignore[union-attr]
    assert "maxChildren=3 reached" in said, said
    told = [e.payload for m in middles for e in await stream(redis, m) if e.kind == "tool_result"]
    over = [t["content"] for t in told if "maxDescendants=4 reached" in str(t.get("content", ""))]
    assert len(over) == 2, told
    assert {r.status.value for r in mids.values()} == {"completed"}  # refused middles answered all the same


async def test_one_tenants_held_children_do_not_fill_the_queue_against_another_tenant(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    """The pool's queue holds 4; tenant-a (maxActive 4, maxRunning 1) starts two roots of three children
    each: unbounded, its held children would fill the queue and tenant-b would get 429 queue_full."""
    path = profiles(tmp_path, child_sleep_ms=1500)
    quotas = orjson.dumps({"tenant-a": {"maxActive": 4, "maxRunning": 1}}).decode()
    env = {"AGENTMILL_PROFILES": path, "AGENTMILL_TENANT_QUOTAS": quotas, "AGENTMILL_ID_SECRET": SECRET}
    cfg = api_settings(redis_url, profiles=path, tenant_quotas=quotas, max_queue_depth=4, id_secret=SECRET)
    w = WorkerProc(redis_url, env=env, log=tmp_path / "w.log").start()
    try:
        async with api(cfg) as url, httpx.AsyncClient(base_url=url) as http:
            body = boss_run([ask("1", "2", "3"), {"echoContext": True}])
            roots = []
            for _ in range(2):
                r = await http.post("/v1/runs", json=body, headers=A)
                assert r.status_code == 202, r.text
                roots.append(r.json()["runId"])
            for _ in range(200):  # both roots have made (or been refused) their children
                if (await tenant_runs(redis, "tenant-a")).count("completed") >= 1:
                    break
                await asyncio.sleep(0.05)
            # one root parked with two children (its third refused), the other refused all three and
            # answered: unbounded, six children would wait in the queue
            statuses = await tenant_runs(redis, "tenant-a")
            assert len(statuses) == 4 and statuses.count("awaiting_children") == 1, statuses
            await asyncio.sleep(0.6)  # past the API's cached queue depth
            r = await http.post("/v1/runs", json=boss_run([{"text": "b here"}]), headers=B)
            assert r.status_code == 202, r.text
    finally:
        w.stop()
