"""GET /v1/pool, the console's pool page's data: live workers with their runs and lease age, queue
depth per partition, and runs started and ended per minute, reported by real workers to a real
Redis (worker/telemetry/pool_report.py) and read back by the API (producer/pool.py)."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from redis.asyncio import Redis

from tests.integration.api_support import A, B, api, run_body, settings
from tests.integration.helpers import running_worker

pytestmark = pytest.mark.integration


async def _ended(c: httpx.AsyncClient, run_ids: list[str], within_s: float = 20.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + within_s
    pending = set(run_ids)
    while pending and loop.time() < end:
        for rid in list(pending):
            r = await c.get(f"/v1/runs/{rid}", headers=A)
            if r.json()["status"] in ("completed", "failed", "aborted"):
                pending.discard(rid)
        await asyncio.sleep(0.1)
    assert not pending, pending


async def test_pool_view_counts_what_workers_did(redis_url: str, redis: Redis) -> None:
    s = settings(redis_url, operator_tenants="tenant-a", partitions=2)
    async with api(s) as base, httpx.AsyncClient(base_url=base) as c:
        slow = run_body([{"text": "slow", "delayMs": 3000}])
        async with running_worker(redis_url, partitions=2) as wp:
            ok = [(await c.post("/v1/runs", json=run_body(), headers=A)).json()["runId"] for _ in range(5)]
            bad = (await c.post("/v1/runs", json=run_body([{"error": {"status": 400}}]), headers=A)).json()
            held = (await c.post("/v1/runs", json=slow, headers=A)).json()["runId"]
            await _ended(c, [*ok, bad["runId"]])
            # While one run is still held: the worker is live, holds it, renewed its lease lately.
            view = (await c.get("/v1/pool", headers=A)).json()
            assert [w["leaseId"] for w in view["workers"]] == [wp.deps.lease_id]
            w = view["workers"][0]
            assert w["runs"] == 1
            assert 0 <= w["leaseAgeMs"] < s.lease_ms and 0 < w["expiresInMs"] <= s.lease_ms
            assert [p["index"] for p in view["partitions"]] == [0, 1]
            assert sum(p["running"] for p in view["partitions"]) == 1
            await _ended(c, [held])
        # The worker stopped: its last report is in; the minutes add up to what it did.
        view = (await c.get("/v1/pool", headers=A)).json()
        assert view["lastHour"] == {"started": 7, "completed": 6, "failed": 1, "aborted": 0}
        assert len(view["minutes"]) == 60 and view["minutes"][-1]["minute"] <= view["now"]
        assert sum(m["started"] for m in view["minutes"]) == 7
        assert view["workers"] == []  # its lease was given up


async def test_pool_view_is_for_operators_only(redis_url: str) -> None:
    async with (
        api(settings(redis_url, operator_tenants="tenant-a")) as base,
        httpx.AsyncClient(base_url=base) as c,
    ):
        r = await c.get("/v1/pool", headers=B)
        assert r.status_code == 403 and r.json()["error"]["code"] == "not_operator"
        assert (await c.get("/v1/pool")).status_code == 401
        assert (await c.get("/v1/pool", headers=A)).status_code == 200
