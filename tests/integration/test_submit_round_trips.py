"""One API submission with the default quotas (maxActive, submitsPerSecond) is one round trip to
Redis: the tenant's rate and maxActive are checked by the script that creates the run
(admit_submit.lua), its audit entry written there too; and a submission refused, by a quota or by
the script, counts nothing against the tenant (counted as the packed writes on the connections)."""

from __future__ import annotations

import time

import httpx
import orjson
import pytest
from redis.asyncio import Redis

from shared import keys
from tests.integration.api_support import A, api, key, run_body, settings
from tests.support.round_trips import counted

pytestmark = pytest.mark.integration

B = {"Authorization": "Bearer tok-b"}


async def test_an_api_submission_with_the_default_quotas_is_one_round_trip(
    redis: Redis, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with api(settings(redis_url)) as url, httpx.AsyncClient(base_url=url, headers=A) as c:
        assert (await c.post("/v1/runs", json=run_body())).status_code == 202  # scripts loaded, connected
        with counted(monkeypatch, new_tasks_only=True) as n:
            for _ in range(10):
                assert (await c.post("/v1/runs", json=run_body())).status_code == 202
    print(f"round trips per API submission: {n[0] / 10:g}")
    assert n[0] == 10, n[0]
    home = keys.Layout().home("tenant-a")
    assert await redis.zcard(home.tenant_active("tenant-a")) == 11  # each counted against maxActive
    assert await redis.xlen(home.audit("tenant-a")) == 11  # and audited
    assert await redis.exists(home.tenant_rate("tenant-a"))  # and its token taken


async def test_a_refused_submission_counts_nothing(redis: Redis, redis_url: str) -> None:
    quotas = orjson.dumps({"tenant-b": {"maxActive": 2}}).decode()
    home = keys.Layout().home("tenant-b")
    active, audit = home.tenant_active("tenant-b"), home.audit("tenant-b")
    async with (
        api(settings(redis_url, tenant_quotas=quotas)) as url,
        httpx.AsyncClient(base_url=url, headers=B) as c,
    ):
        first = (await c.post("/v1/runs", json=run_body())).json()["runId"]
        # refused by the script that creates it (an unknown session): neither counted nor let in
        r = await c.post("/v1/runs", json=run_body(sessionId="nope", runId="r-unknown"))
        assert r.status_code == 404, r.text
        assert await redis.zcard(active) == 1
        assert (await c.post("/v1/runs", json=run_body())).status_code == 202
        assert await redis.zcard(active) == 2
        entries = await redis.xlen(audit)
        r = await c.post("/v1/runs", json=run_body(runId="r-full"))
        assert r.status_code == 429 and r.json()["error"]["code"] == "quota_exceeded", r.text
        assert "2 queued and running" in r.json()["error"]["message"]
        assert await redis.zcard(active) == 2 and not await redis.zscore(active, key("r-full", "tenant-b"))
        assert await redis.xlen(audit) == entries  # a refused submission is not audited (as before)
        assert (await c.post("/v1/runs", json=run_body(runId=first))).status_code in (200, 409)


async def test_with_partitions_a_refusal_takes_no_token_and_counts_nothing(
    redis: Redis, redis_url: str
) -> None:
    """Four partitions: a run's partition is the tenant's home (its bucket taken in the script) or
    not (taken at home first, given back on a refusal); the tenant's runs counted on every one."""
    quotas = orjson.dumps({"tenant-b": {"maxActive": 3, "submitsPerSecond": 1}}).decode()
    layout = keys.Layout(4)
    bucket = layout.home("tenant-b").tenant_rate("tenant-b")

    async def counted_runs() -> int:
        return sum([await redis.zcard(p.tenant_active("tenant-b")) for p in layout.parts])

    s = settings(redis_url, tenant_quotas=quotas, partitions=4, max_batch=20)  # a bucket of 21
    async with api(s) as url, httpx.AsyncClient(base_url=url, headers=B) as c:
        t0 = time.monotonic()
        ids = [(await c.post("/v1/runs", json=run_body())).json()["runId"] for _ in range(3)]
        for _ in range(4):
            r = await c.post("/v1/runs", json=run_body())
            assert r.status_code == 429 and r.json()["error"]["code"] == "quota_exceeded", r.text
            assert "has 3 queued and running" in r.json()["error"]["message"]
        assert await counted_runs() == 3
        tokens = float(await redis.hget(bucket, "tokens") or 0) / 1000
        assert 18 <= tokens <= 18 + time.monotonic() - t0 + 1, tokens  # 3 taken, none by the refusals
        assert (await c.post(f"/v1/runs/{ids[0]}/abort")).status_code == 200
        assert (await c.post("/v1/runs", json=run_body())).status_code == 202
        assert await counted_runs() == 3
