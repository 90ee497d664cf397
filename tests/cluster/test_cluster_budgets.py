"""A tenant's day budget on a real Redis Cluster (three masters, 16 partitions): its runs live on
every partition and master, yet every model call reserves and settles on the one key of its tenant
(one slot), so the tenant never overspends; its usage report sums the partitions of every master,
the runs a worker ended and the runs ended outside a worker (in the slot of the run's partition)."""

from __future__ import annotations

import asyncio
import datetime as dt
import shutil
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from redis.asyncio.cluster import RedisCluster

from shared import keys
from shared.fields import BudgetField
from tests.integration.api_support import A, B, api, key
from tests.integration.api_support import settings as api_settings
from tests.integration.helpers import running_worker
from tests.support.redis_cluster import LocalRedisCluster
from tests.support.schema import ids_where

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(180),
    pytest.mark.skipif(
        shutil.which("redis-cli") is None or shutil.which("redis-server") is None,
        reason="redis-server and redis-cli are needed to create a cluster",
    ),
]


async def test_one_tenants_runs_on_every_master_share_one_budget(tmp_path: Path) -> None:
    path = tmp_path / "profiles.json"
    path.write_bytes(orjson.dumps({"profiles": [{
        "name": "small", "provider": {"kind": "scripted", "mode": "script", "maxTokens": 50},
        "tools": ["echo"]}]}))  # fmt: skip
    per_day = 4_000
    quotas = orjson.dumps({"tenant-b": {"tokensPerDay": per_day}}).decode()
    script = [{"toolCalls": [{"name": "echo", "arguments": {"text": "x"}}]}] * 3 + [{"text": "done"}]
    run: dict[str, Any] = {"agent": "small", "inputMessages": [{"role": "user", "content": "go"}],
                           "runtimeHints": {"script": script}}  # fmt: skip
    with LocalRedisCluster(masters=3, replicas_per_master=0) as cluster:
        s = api_settings(cluster.url, redis_cluster=True, tenant_quotas=quotas, profiles=str(path))
        async with (
            api(s) as url,
            running_worker(cluster.url, redis_cluster=True, tenant_quotas=quotas, profiles=str(path)),
            running_worker(cluster.url, redis_cluster=True, tenant_quotas=quotas, profiles=str(path)),
            httpx.AsyncClient(base_url=url, headers=B, timeout=15) as http,
        ):
            r = await http.post("/v1/runs/batch", json={"runs": [run] * 40})
            assert r.status_code == 200, r.text
            ids = [i["runId"] for i in r.json()["results"]]
            views: dict[str, Any] = {}
            for _ in range(600):
                for rid in ids:
                    if rid not in views:
                        v = (await http.get(f"/v1/runs/{rid}")).json()
                        if v["status"] in ("completed", "failed"):
                            views[rid] = v
                if len(views) == len(ids):
                    break
                await asyncio.sleep(0.1)
            assert len(views) == len(ids)
            usage = [
                v["result"]["usage"]["inputTokens"] + v["result"]["usage"]["outputTokens"]
                for v in views.values()
            ]
            codes = {v["result"]["lastError"]["code"] for v in views.values() if v["status"] == "failed"}
            assert codes == {"budget_exceeded"} and sum(usage) <= per_day  # the budget bound them
            report = (await http.get("/v1/usage")).json()
            assert report["total"]["runs"] == len(ids)
            assert report["total"]["inputTokens"] + report["total"]["outputTokens"] == sum(usage)
        layout = keys.Layout(16)
        home = layout.home("tenant-b")
        day = dt.datetime.now(dt.UTC).date().isoformat()
        rc = RedisCluster.from_url(cluster.url)
        try:
            raw = await rc.hgetall(home.tenant_budget("tenant-b", day))
        finally:
            await rc.aclose()
        b = {k.decode(): int(v) for k, v in raw.items()}
        assert b[BudgetField.SPENT_TOKENS] == sum(usage) and b[BudgetField.HELD_TOKENS] == 0
        # the runs really were spread over the partitions (and so the masters)
        assert len({layout.of_key(v["streamKey"]).index for v in views.values()}) >= 8


async def test_runs_aborted_while_parked_count_in_the_usage_report_on_every_master(tmp_path: Path) -> None:
    """An abort of a parked run is one script on the run's partition: its usage tally goes to that
    partition's slot (a Redis Cluster refuses a script a key of another slot), and the report sums them."""
    path = tmp_path / "profiles.json"
    path.write_bytes(orjson.dumps({"profiles": [{
        "name": "gated", "provider": {"kind": "scripted", "mode": "script", "maxTokens": 50},
        "tools": ["echo"], "toolSettings": {"echo": {"requiresApproval": True}}}]}))  # fmt: skip
    script = [{"toolCalls": [{"name": "echo", "arguments": {"text": "x"}}]}, {"text": "done"}]
    run: dict[str, Any] = {"agent": "gated", "inputMessages": [{"role": "user", "content": "go"}],
                           "runtimeHints": {"script": script}}  # fmt: skip
    with LocalRedisCluster(masters=3, replicas_per_master=0) as cluster:
        s = api_settings(cluster.url, redis_cluster=True, profiles=str(path))
        async with (
            api(s) as url,
            running_worker(cluster.url, redis_cluster=True, profiles=str(path)),
            httpx.AsyncClient(base_url=url, headers=A, timeout=15) as http,
        ):
            # One run on each of the 16 partitions (random ids left it to chance: 12 runs fell on as
            # few as 5 of the 16 partitions once), so every master has some.
            layout = keys.Layout(16)
            spread = [ids_where(layout, f"ab{i}-", 1, lambda p, i=i: p.index == i, key)[0] for i in range(16)]
            r = await http.post("/v1/runs/batch", json={"runs": [{**run, "runId": rid} for rid in spread]})
            ids = [i["runId"] for i in r.json()["results"]]
            views: dict[str, Any] = {}
            for _ in range(600):
                for rid in ids:
                    if (
                        rid not in views
                        and (v := (await http.get(f"/v1/runs/{rid}")).json())["status"] == "awaiting_human"
                    ):
                        views[rid] = v
                if len(views) == len(ids):
                    break
                await asyncio.sleep(0.1)
            assert len(views) == len(ids)
            for rid in ids:
                assert (await http.post(f"/v1/runs/{rid}/abort")).json()["result"] == "aborted"
            ended = [(await http.get(f"/v1/runs/{rid}")).json() for rid in ids]
            report = (await http.get("/v1/usage")).json()
        assert {v["status"] for v in ended} == {"aborted"}
        assert report["total"]["runs"] == len(ids)
        assert report["total"]["inputTokens"] == sum(v["result"]["usage"]["inputTokens"] for v in ended) > 0
        # the runs really were spread over the partitions (and so the masters)
        assert {layout.of_key(v["streamKey"]).index for v in ended} == set(range(16))
