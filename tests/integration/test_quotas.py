"""Per-tenant quotas: queued+running runs, submissions per second, and fair dispatch."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import orjson
import pytest
from redis.asyncio import Redis

from shared.quotas import Quotas
from shared.settings import Settings
from tests.integration.api_support import A, B, api, body, settings
from tests.integration.helpers import producer_for, running_worker, script_run
from tests.support.schema import K

pytestmark = pytest.mark.integration


async def test_max_active_runs_per_tenant_is_a_429_with_retry_after(redis_url: str) -> None:
    quotas = orjson.dumps({"tenant-b": {"maxActive": 3}}).decode()
    async with (
        api(settings(redis_url, tenant_quotas=quotas)) as url,
        httpx.AsyncClient(base_url=url, headers=B) as cb,
        httpx.AsyncClient(base_url=url, headers=A) as ca,
    ):
        ids = [(await cb.post("/v1/runs", json=body())).json()["runId"] for _ in range(3)]
        r = await cb.post("/v1/runs", json=body())
        assert r.status_code == 429 and r.json()["error"]["code"] == "quota_exceeded"
        assert r.headers["retry-after"] == "5" and "3" in r.json()["error"]["message"]
        r = await cb.post("/v1/runs/batch", json={"runs": [body(), body()]})
        assert r.status_code == 429 and r.json()["error"]["code"] == "quota_exceeded"
        # The same run again takes no new room; another tenant is not affected.
        assert (await cb.post("/v1/runs", json=body(runId=ids[0]))).status_code == 200
        assert (await ca.post("/v1/runs", json=body())).status_code == 202
        # A run that ends frees its place.
        assert (await cb.post(f"/v1/runs/{ids[0]}/abort")).status_code == 200
        assert (await cb.post("/v1/runs", json=body())).status_code == 202


async def test_submissions_per_second_are_limited_per_tenant(redis_url: str) -> None:
    quotas = orjson.dumps({"tenant-b": {"submitsPerSecond": 5}}).decode()
    async with (
        api(settings(redis_url, tenant_quotas=quotas, max_batch=10)) as url,
        httpx.AsyncClient(base_url=url, headers=B) as cb,
        httpx.AsyncClient(base_url=url, headers=A) as ca,
    ):
        t0 = time.monotonic()
        answers = [await cb.post("/v1/runs", json=body()) for _ in range(20)]
        took = time.monotonic() - t0
        codes = [r.status_code for r in answers]
        # The bucket: a burst of a second's worth plus a full batch (5 + 10), then 5 a second.
        assert codes.count(202) <= 15 + 5 * (int(took) + 1) and 429 in codes, codes
        limited = next(r for r in answers if r.status_code == 429)
        assert limited.json()["error"]["code"] == "rate_limited" and limited.headers["retry-after"] == "1"
        assert [(await ca.post("/v1/runs", json=body())).status_code for _ in range(8)] == [202] * 8
        # A full batch needs 10 tokens: 2 s at 5 a second, which the 429 says.
        full = await cb.post("/v1/runs/batch", json={"runs": [body() for _ in range(10)]})
        assert full.status_code == 429 and full.headers["retry-after"] == "2", full.text
        await asyncio.sleep(1.1)
        assert (await cb.post("/v1/runs", json=body())).status_code == 202


async def test_a_full_batch_is_admitted_after_other_submissions_in_the_same_second(redis_url: str) -> None:
    """The default bucket holds a second's worth plus a full batch: a tenant that just submitted
    runs can still send a full batch at once (a fixed one-second window refused it whole)."""
    async with (
        api(settings(redis_url, tenant_submits_per_second=20, max_batch=20)) as url,
        httpx.AsyncClient(base_url=url, headers=B) as cb,
    ):
        assert (await cb.post("/v1/runs/batch", json={"runs": [body() for _ in range(5)]})).status_code == 200
        full = await cb.post("/v1/runs/batch", json={"runs": [body() for _ in range(20)]})
        assert full.status_code == 200 and all("runId" in r for r in full.json()["results"]), full.text


def test_quota_overrides_inherit_the_defaults() -> None:
    s = Settings(tenant_max_active=7, tenant_max_running=3, tenant_submits_per_second=9,
                 tenant_quotas='{"t1": {"maxRunning": 1}, "t2": {"maxActive": 2}}')  # fmt: skip
    q = Quotas(s)
    assert (q.of("t1").max_active, q.of("t1").max_running, q.of("t1").submits_per_second) == (7, 1, 9)
    assert (q.of("t2").max_active, q.of("t2").max_running) == (2, 3)
    assert q.of("other") == q.default
    assert orjson.loads(q.running_overrides_json) == {"t1": 1, "default": 0}


def test_the_default_tenant_has_no_running_cap_unless_named() -> None:
    s = Settings(tenant_max_active=7, tenant_max_running=3)
    assert (Quotas(s).of("default").max_running, Quotas(s).of("default").max_active) == (0, 7)
    named = Quotas(Settings(tenant_max_running=3, tenant_quotas='{"default": {"maxRunning": 2}}'))
    assert named.of("default").max_running == 2


async def test_a_single_tenant_pool_runs_past_the_per_tenant_cap(redis: Redis, redis_url: str) -> None:
    # The cap is fairness between tenants; the default tenant (auth off, the Python producer) alone
    # runs as many runs at once as the worker holds.
    p = producer_for(redis, redis_url)
    ids = [s.run_id for s in await p.submit_many([script_run([{"stall": True}]) for _ in range(6)])]  # type: ignore[union-attr]
    async with running_worker(redis_url, max_jobs=10, tenant_max_running=2, drain_timeout_s=0.5):
        deadline = time.monotonic() + 20
        while True:
            async with redis.pipeline(transaction=False) as pipe:
                for rid in ids:
                    pipe.hget(K.run(rid), "status")
                running = sum(1 for st in await pipe.execute() if st == b"running")
            if running == len(ids):
                break
            assert time.monotonic() < deadline, f"only {running} of {len(ids)} runs started"
            await asyncio.sleep(0.05)


async def test_a_noisy_tenants_500_stalled_runs_leave_another_tenants_run_starting_within_a_second(
    redis: Redis, redis_url: str
) -> None:
    # One worker with room for 150 runs; tenant B may run 100 at once. B's 500 stalled runs are
    # ahead of A's run in the queue: B gets its 100, the rest wait their turn, A's starts at once.
    p = producer_for(redis, redis_url)
    stalled: list[dict[str, Any]] = [script_run([{"stall": True}]) for _ in range(500)]
    b_ids = [s.run_id for s in await p.submit_many(stalled, tenant="tenant-b")]  # type: ignore[union-attr]
    async with running_worker(redis_url, max_jobs=150, tenant_max_running=100, drain_timeout_s=0.5):
        deadline = time.monotonic() + 30
        while await redis.zcard(K.tenant_running("tenant-b")) < 100:
            assert time.monotonic() < deadline, "tenant B's runs did not start"
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)  # a few polls with B at its cap
        t0 = time.monotonic()
        a = await p.submit(script_run([{"text": "hi"}]), tenant="tenant-a")
        while (await redis.hget(K.run(a.run_id), "status")) == b"queued":
            assert time.monotonic() - t0 < 1.0, "tenant A's run did not start within a second"
            await asyncio.sleep(0.02)
        started_after = time.monotonic() - t0
        async with redis.pipeline(transaction=False) as pipe:
            for rid in b_ids:
                pipe.hget(K.run(rid), "status")
            running_b = sum(1 for st in await pipe.execute() if st == b"running")
    assert started_after < 1.0
    assert running_b <= 100  # B never ran more than its cap
