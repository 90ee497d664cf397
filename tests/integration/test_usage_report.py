"""GET /v1/usage: a tenant's usage by UTC day and agent, summed over the partitions
its runs ended on; tenants see their own only; the range is bounded; the Python client reads it."""

from __future__ import annotations

import asyncio
import datetime as dt
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from redis.asyncio import Redis

from agentmill_client import Client
from tests.integration.api_support import A, B, api, settings
from tests.integration.helpers import running_worker

pytestmark = pytest.mark.integration
PRICING = {"inputPerMTok": 2.0, "outputPerMTok": 8.0}


def profiles(tmp_path: Path) -> Path:
    path = tmp_path / "profiles.json"
    provider = {"kind": "scripted", "mode": "script", "maxTokens": 50, "pricing": PRICING}
    path.write_bytes(orjson.dumps({"profiles": [
        {"name": "small", "provider": provider, "tools": ["echo"]},
        {"name": "other", "provider": provider},
        {"name": "gated", "provider": provider, "tools": ["echo"], "toolSettings": {"echo": {"requiresApproval": True}}},
    ]}))  # fmt: skip
    return path


def run(agent: str, steps: int) -> dict[str, Any]:
    script = [{"toolCalls": [{"name": "echo", "arguments": {"text": "x"}}]}] * steps + [{"text": "done"}]
    return {
        "agent": agent,
        "inputMessages": [{"role": "user", "content": "go"}],
        "runtimeHints": {"script": script},
    }


async def finished(
    c: httpx.AsyncClient, run_id: str, until: tuple[str, ...] = ("completed", "failed", "aborted")
) -> dict[str, Any]:
    for _ in range(400):
        view: dict[str, Any] = (await c.get(f"/v1/runs/{run_id}")).json()
        if view["status"] in until:
            return view
        await asyncio.sleep(0.05)
    raise AssertionError(f"run {run_id} did not reach {until}")


async def test_usage_by_day_and_agent_is_the_sum_of_the_tenants_runs(redis_url: str, tmp_path: Path) -> None:
    path = profiles(tmp_path)
    s = settings(redis_url, profiles=str(path), partitions=4)
    async with (
        api(s) as url,
        running_worker(redis_url, profiles=str(path), partitions=4),
        httpx.AsyncClient(base_url=url, headers=A) as ca,
        httpx.AsyncClient(base_url=url, headers=B) as cb,
    ):
        bodies = [run("small", 2), run("small", 0), run("small", 1), run("other", 0)]
        ids = [(await ca.post("/v1/runs", json=b)).json()["runId"] for b in bodies]
        b_id = (await cb.post("/v1/runs", json=run("small", 3))).json()["runId"]
        views = [await finished(ca, i) for i in ids]
        await finished(cb, b_id)
        today = dt.datetime.now(dt.UTC).date().isoformat()
        r = await ca.get("/v1/usage", params={"from": today, "to": today})
        assert r.status_code == 200, r.text
        report = r.json()
        assert report["from"] == report["to"] == today and [d["day"] for d in report["days"]] == [today]
        agents = report["days"][0]["agents"]
        for agent, mine in (("small", views[:3]), ("other", views[3:])):
            usage = [v["result"]["usage"] for v in mine]
            got = agents[agent]
            assert got["runs"] == len(mine)
            assert got["inputTokens"] == sum(u["inputTokens"] for u in usage)
            assert got["outputTokens"] == sum(u["outputTokens"] for u in usage)
            assert got["costUsd"] == pytest.approx(sum(u["costUsd"] for u in usage))
        assert report["total"]["runs"] == 4 and report["days"][0]["total"] == report["total"]
        # Each partition's hash of the day expires the retention after its first run (commit.lua
        # sets the expiry only when a run adds a new field: the day's first run of an agent).
        r0 = Redis.from_url(redis_url)
        try:
            ttls = [await r0.ttl(k) async for k in r0.scan_iter(match="*usage:*", count=1000)]
        finally:
            await r0.aclose()
        assert ttls and all(400 * 86_400 - 120 < t <= 400 * 86_400 for t in ttls), ttls
        # Another tenant sees its own run only.
        theirs = (await cb.get("/v1/usage")).json()
        assert theirs["total"]["runs"] == 1 and len(theirs["days"]) == 30 and theirs["to"] == today
        # The range is bounded and checked.
        for params in ({"from": "2026-01-01", "to": "2026-12-31"}, {"from": today, "to": "2020-01-01"},
                       {"from": "yesterday"}):  # fmt: skip
            bad = await ca.get("/v1/usage", params=params)
            assert bad.status_code == 422 and bad.json()["error"]["code"] == "invalid_range", bad.text

        def client_read() -> Any:
            with Client(url, token="tok-a") as c:
                return c.usage(start=today, end=today)

        answer = await asyncio.to_thread(client_read)
        assert answer.total.runs == 4 and answer.days[0].agents["other"].runs == 1


async def test_a_run_ended_outside_its_worker_counts_once_with_what_it_spent(
    redis_url: str, tmp_path: Path
) -> None:
    """A run that made a model call and parked for approval (its tool requiresApproval) counts in the
    report with its tokens and cost and runs=1 when it ends outside a worker: aborted through the API
    (tenant A), or past its approval timeout (tenant B: the reconciler ends it). A run aborted while
    queued, before any worker started it, counts for nothing (as a worker's ending of a run that never
    started: worker/runner/tally.py)."""
    path = profiles(tmp_path)
    s = settings(redis_url, profiles=str(path), partitions=4)
    gated = run("gated", 1)
    async with (
        api(s) as url,
        httpx.AsyncClient(base_url=url, headers=A) as ca,
        httpx.AsyncClient(base_url=url, headers=B) as cb,
    ):
        never = (await ca.post("/v1/runs", json=gated)).json()["runId"]
        assert (await ca.post(f"/v1/runs/{never}/abort")).json()["result"] == "aborted"
        async with running_worker(redis_url, profiles=str(path), partitions=4, reconcile_ms=200):
            aborted = (await ca.post("/v1/runs", json=gated)).json()["runId"]
            timeout = {**gated, "toolPolicy": {"approvalTimeoutMs": 1_000}}
            timed_out = (await cb.post("/v1/runs", json=timeout)).json()["runId"]
            parked = await finished(ca, aborted, until=("awaiting_human",))
            assert parked["usage"]["inputTokens"] > 0  # it made its model call before it parked
            assert (await ca.post(f"/v1/runs/{aborted}/abort")).json()["result"] == "aborted"
            ends = [await finished(ca, aborted), await finished(cb, timed_out)]
        today = dt.datetime.now(dt.UTC).date().isoformat()
        for c, view, code in zip((ca, cb), ends, ("aborted", "approval_timeout"), strict=True):
            assert view["result"]["lastError"]["code"] == code, view
            usage = view["result"]["usage"]
            assert usage["inputTokens"] > 0 and usage["costUsd"] > 0
            report = (await c.get("/v1/usage", params={"from": today, "to": today})).json()
            got = report["days"][0]["agents"]
            assert list(got) == ["gated"] and got["gated"]["runs"] == 1 and report["total"]["runs"] == 1, (
                report
            )
            assert (got["gated"]["inputTokens"], got["gated"]["outputTokens"]) == (
                usage["inputTokens"],
                usage["outputTokens"],
            )
            assert got["gated"]["costUsd"] == pytest.approx(usage["costUsd"])
