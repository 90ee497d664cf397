"""Cost and budgets at cache-correct prices, on a real API, redis-server and workers (one in this
process; two processes where runs race): a
scripted model priced as Claude Sonnet 4.5 by the price table reports cache reads and writes as
Anthropic does; each call's settled cost is genai-prices' own ``calc_price`` of its recorded usage,
and the run's, its batch's, its tenant's day budget's and GET /v1/usage's figures are their sums;
a tenant's costUsdPerDay with caching on is never exceeded by runs racing on two workers; a cost
budget on an unpriced model is a 422."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from genai_prices import Usage as TableUsage
from genai_prices import calc_price
from redis.asyncio import Redis

from shared.clock import now_ms, utc_day
from shared.fields import BudgetField
from shared.prices import round_usd
from shared.quotas import NANO_USD
from tests.integration.api_support import A, api, settings, until_batch
from tests.integration.helpers import producer_for, running_worker, stream, wait_all
from tests.support.procs import workers
from tests.support.schema import K

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

MODEL = "claude-sonnet-4-5"
SYSTEM = "You are a careful agent. " * 240  # ~1,500 tokens: a prefix long enough to cache


def profiles(tmp_path: Path) -> Path:
    provider = {"kind": "scripted", "mode": "script", "model": MODEL, "reportCache": True, "maxTokens": 50}
    path = tmp_path / "profiles.json"
    path.write_bytes(orjson.dumps({"profiles": [
        {"name": "cached", "provider": provider, "systemPrompt": SYSTEM, "tools": ["echo"],
         "loopLimits": {"maxIterations": 100}},
        {"name": "local", "provider": {"kind": "scripted", "mode": "script"}},
    ]}))  # fmt: skip
    return path


def steps(n: int, agent: str = "cached", **extra: Any) -> dict[str, Any]:
    script = [{"toolCalls": [{"name": "echo", "arguments": {"text": f"step {i}"}}]} for i in range(n)]
    return {"agent": agent, "inputMessages": [{"role": "user", "content": "go"}],
            "runtimeHints": {"script": [*script, {"text": "done"}]}, **extra}  # fmt: skip


def table_cost(u: dict[str, Any]) -> float:
    """genai-prices' own calculation of one call's recorded usage, to the nano-USD."""
    usage = TableUsage(
        input_tokens=u["inputTokens"],
        output_tokens=u["outputTokens"],
        cache_read_tokens=u["cacheReadTokens"],
        cache_write_tokens=u["cacheWriteTokens"],
    )
    return round_usd(calc_price(usage, MODEL, provider_id="anthropic").total_price)


async def day_budget(redis: Redis, tenant: str) -> dict[str, int]:
    raw = await redis.hgetall(K.tenant_budget(tenant, utc_day(now_ms())))
    return {k.decode(): int(v) for k, v in raw.items()}


async def test_a_cached_runs_settled_cost_is_the_tables_own_calculation_on_its_recorded_usage(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    path = profiles(tmp_path)
    quotas = orjson.dumps({"tenant-a": {"costUsdPerDay": 100}}).decode()
    s = settings(redis_url, profiles=str(path), tenant_quotas=quotas)
    async with api(s) as url, httpx.AsyncClient(base_url=url, headers=A) as c:
        r = await c.post("/v1/runs/batch", json={"runs": [steps(6), steps(3)]})
        assert r.status_code == 200, r.text
        batch_id, ids = r.json()["batchId"], [x["runId"] for x in r.json()["results"]]
        async with running_worker(
            redis_url, profiles=str(path), tenant_quotas=quotas, api_tokens=s.api_tokens
        ):
            batch = await until_batch(c, batch_id, lambda b: b["finished"], within=60)
        assert batch["finished"], batch
        views = [(await c.get(f"/v1/runs/{i}")).json() for i in ids]
        today = dt.datetime.now(dt.UTC).date().isoformat()
        report = (await c.get("/v1/usage", params={"from": today, "to": today})).json()
        # an unpriced model cannot carry a cost budget: refused, not counted as free
        refused = await c.post("/v1/runs", json=steps(0, agent="local", budget={"maxCostUsd": 1}))
        assert refused.status_code == 422 and refused.json()["error"]["code"] == "unpriced_model", (
            refused.text
        )
        assert "has no price" in refused.json()["error"]["message"]
    total_cost, reads, writes = Decimal(0), 0, 0
    assert all(v["status"] == "completed" for v in views), views
    # each call's usage event: its cost is the table's calculation of its own tokens
    for rid in ids:
        events = await _events(redis, rid)
        calls = [e.payload["usage"] for e in events if e.kind == "usage"]
        assert len(calls) >= 4
        assert calls[0]["cacheReadTokens"] == 0 and calls[0]["cacheWriteTokens"] > 0  # the first call writes
        assert all(u["cacheReadTokens"] > 0 for u in calls[1:])  # the next ones read the earlier steps
        for u in calls:
            assert u["inputTokens"] >= u["cacheReadTokens"] + u["cacheWriteTokens"]
            assert u["costUsd"] == table_cost(u), u
        view = next(v for v in views if v["runId"] == rid)
        run_usage = view["result"]["usage"]
        assert view["usage"] == run_usage  # the run hash's fields, as GET shows them while it runs
        assert run_usage["costUsd"] == float(sum(Decimal(repr(u["costUsd"])) for u in calls))
        assert run_usage["cacheReadTokens"] == sum(u["cacheReadTokens"] for u in calls)
        total_cost += Decimal(repr(run_usage["costUsd"]))
        reads += run_usage["cacheReadTokens"]
        writes += run_usage["cacheWriteTokens"]
    # the batch's, the day report's and the tenant's day budget's figures are the runs' sums
    assert (batch["usage"]["cacheReadTokens"], batch["usage"]["cacheWriteTokens"]) == (reads, writes)
    assert batch["usage"]["costUsd"] == pytest.approx(float(total_cost), abs=1e-9)
    got = report["total"]
    assert (got["cacheReadTokens"], got["cacheWriteTokens"], got["costUsd"]) == (
        reads,
        writes,
        float(total_cost),
    )
    b = await day_budget(redis, "tenant-a")
    assert b[BudgetField.SPENT_COST] == round(total_cost * NANO_USD) and b.get(BudgetField.HELD_COST, 0) == 0
    # cached, the runs cost less than the same tokens at the input price
    uncached = sum(v["result"]["usage"]["inputTokens"] for v in views) * 3 / 1e6
    assert float(total_cost) < uncached


async def _events(redis: Redis, run_id: str) -> list[Any]:
    """A run's events by the id the API answered (tenant-a's runs' keys use their scoped id)."""
    from tests.integration.api_support import key

    return await stream(redis, key(run_id))


async def test_a_tenants_cost_per_day_with_caching_is_never_exceeded_by_runs_racing_on_two_workers(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    path = profiles(tmp_path)
    per_day = 0.25  # about 30 calls of ~$0.006 at the table's prices: the day runs out mid-way
    quotas = orjson.dumps({"default": {"costUsdPerDay": per_day}}).decode()
    p = producer_for(redis, redis_url, profiles=str(path), tenant_quotas=quotas)
    subs = await p.submit_many([steps(4) for _ in range(16)])
    ids = [s.run_id for s in subs]  # type: ignore[union-attr]
    with workers(redis_url, 2, env={"AGENTMILL_PROFILES": str(path), "AGENTMILL_TENANT_QUOTAS": quotas}):
        recs = await wait_all(p, ids, 120)
    costs = [r.result.usage.cost_usd or 0.0 for r in recs.values() if r.result and r.result.usage]  # type: ignore[union-attr]
    codes = {r.result.last_error.code for r in recs.values() if r.result and r.result.last_error}
    assert codes == {"budget_exceeded"}, codes  # the day ran out: later calls were refused
    b = await day_budget(redis, "default")
    # settled at the cache-aware cost, which never passes the worst case held: the day is never exceeded
    assert b[BudgetField.SPENT_COST] == sum(round(c * NANO_USD) for c in costs)
    assert b[BudgetField.SPENT_COST] <= per_day * NANO_USD, b
    assert b.get(BudgetField.HELD_COST, 0) == 0 and b.get(BudgetField.OVERCOUNT, 0) in (0, 1000)
    # (each call holds its prompt's bytes at the cache-write price, dearer than the call turns out
    # with most of its prompt read from the cache: runs in flight together are refused early)
    statuses = [r.status.value for r in recs.values()]
    assert "completed" in statuses and sum(costs) > per_day / 10, (statuses, costs)
