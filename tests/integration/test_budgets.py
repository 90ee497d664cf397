"""Run budgets and tenants' day budgets, with real worker processes where the guarantee
is about processes: a run with maxTokens ends budget_exceeded before the call that would cross it;
50 runs of one tenant racing on two workers never overspend its tokensPerDay; a worker SIGKILLed
between its hold and its settlement leaks nothing for good; a spent day is a 429 at submission."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from redis.asyncio import Redis

from shared.clock import now_ms, utc_day
from shared.fields import BudgetField
from tests.integration.api_support import A, B, api, body, settings
from tests.integration.helpers import (
    assert_clean_stream,
    producer_for,
    running_worker,
    stream,
    wait_all,
)
from tests.support.procs import WorkerProc, wait_until, workers
from tests.support.schema import K

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

MAX_TOKENS = 50  # the model's maxTokens: a call's worst-case reply
FAST = {"AGENTMILL_LEASE_MS": "1500", "AGENTMILL_HEARTBEAT_MS": "300", "AGENTMILL_RECONCILE_MS": "300"}


def profiles(tmp_path: Path) -> Path:
    path = tmp_path / "profiles.json"
    path.write_bytes(orjson.dumps({"profiles": [{
        "name": "small", "provider": {"kind": "scripted", "mode": "script", "maxTokens": MAX_TOKENS},
        "tools": ["echo"], "loopLimits": {"maxIterations": 100}}]}))  # fmt: skip
    return path


def small_run(steps: int, **extra: Any) -> dict[str, Any]:
    script = [{"toolCalls": [{"name": "echo", "arguments": {"text": f"step {i}"}}]} for i in range(steps)]
    return {"agent": "small", "inputMessages": [{"role": "user", "content": "go"}],
            "runtimeHints": {"script": [*script, {"text": "done"}]}, **extra}  # fmt: skip


def tokens(usage: Any) -> int:
    return int(usage.input_tokens + usage.output_tokens) if usage is not None else 0


async def budget_of(redis: Redis, tenant: str) -> dict[str, int]:
    key = K.tenant_budget(tenant, utc_day(now_ms()))
    raw = await redis.hgetall(key)
    return {k.decode(): int(v) for k, v in raw.items()}


async def test_a_run_with_max_tokens_ends_budget_exceeded_before_the_call_that_would_cross_it(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    path = profiles(tmp_path)
    limit = 1000  # a few calls: each one holds its prompt (the preamble included) and MAX_TOKENS
    p = producer_for(redis, redis_url, profiles=str(path))
    sub = await p.submit(small_run(10, budget={"maxTokens": limit}))
    async with running_worker(redis_url, profiles=str(path)):
        rec = (await wait_all(p, [sub.run_id], 30))[sub.run_id]
    events = await stream(redis, sub.run_id)
    assert_clean_stream(events)
    assert rec.status.value == "failed", rec.result
    err = rec.result.last_error
    assert err is not None and err.code == "budget_exceeded"
    spent = tokens(rec.result.usage)
    assert 0 < spent <= limit
    assert f"spent {spent} tokens" in err.message and f"> {limit}" in err.message
    # The refused call's worst case is in the message: spent + it crosses the limit, and it was never made.
    need = int(err.message.split("reserves ")[1].split(" ")[0])
    assert spent + need > limit and need >= MAX_TOKENS
    calls = [e for e in events if e.kind == "usage"]
    assert sum(e.payload["usage"]["inputTokens"] + e.payload["usage"]["outputTokens"] for e in calls) == spent
    # never in the middle of a tool call: every call made has its result
    made = {e.payload["toolCallId"] for e in events if e.kind == "tool_call"}
    assert made and made == {e.payload["toolCallId"] for e in events if e.kind == "tool_result"}
    assert 1 <= len(calls) < 11  # it stopped early


async def test_fifty_runs_racing_on_two_workers_never_overspend_the_tenants_day(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    path = profiles(tmp_path)
    per_day = 6_000
    quotas = orjson.dumps({"default": {"tokensPerDay": per_day}}).decode()
    p = producer_for(redis, redis_url, profiles=str(path))
    subs = await p.submit_many([small_run(3) for _ in range(50)])
    ids = [s.run_id for s in subs]  # type: ignore[union-attr]
    env = {"AGENTMILL_PROFILES": str(path), "AGENTMILL_TENANT_QUOTAS": quotas}
    with workers(redis_url, 2, env=env):
        recs = await wait_all(p, ids, 120)
    usage = [tokens(r.result.usage) for r in recs.values()]  # type: ignore[union-attr]
    statuses = [r.status.value for r in recs.values()]
    codes = {r.result.last_error.code for r in recs.values() if r.result and r.result.last_error}
    # (as the day runs out, every run still going is refused its next call: which ones is a race)
    assert set(statuses) <= {"completed", "failed"} and codes == {"budget_exceeded"}, (statuses, codes)
    # Never overspent (each call settles at most what it held), and the bill is the runs' usage.
    b = await budget_of(redis, "default")
    assert sum(usage) <= per_day, (b, usage)
    assert b[BudgetField.SPENT_TOKENS] == sum(usage)
    assert b.get(BudgetField.HELD_TOKENS, 0) == 0 and b.get(BudgetField.HELD_COST, 0) == 0
    assert b[BudgetField.REFUSED] >= statuses.count("failed")
    assert sum(usage) > per_day // 2  # and the day was used, not refused early


async def test_a_worker_killed_between_hold_and_settlement_leaks_no_hold(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    path = profiles(tmp_path)
    # One hold (~1,150 tokens: the prompt's bytes, its system prompt's preamble most of them, + maxTokens
    # 50) fits the day, two do not: the run resumes only if its dead worker's hold was released.
    per_day = 2_000
    quotas = orjson.dumps({"default": {"tokensPerDay": per_day}}).decode()
    env = {**FAST, "AGENTMILL_PROFILES": str(path), "AGENTMILL_TENANT_QUOTAS": quotas,
           "AGENTMILL_BUDGET_HOLD_MS": "1000"}  # fmt: skip
    p = producer_for(redis, redis_url, profiles=str(path))
    sub = await p.submit(small_run(0))
    doomed = WorkerProc(redis_url, env={**env, "AGENTMILL_FAILPOINTS": "after_budget_reserve:1"}).start()
    assert wait_until(lambda: not doomed.alive, 30), "the worker never reached after_budget_reserve"
    held = await budget_of(redis, "default")
    assert (
        per_day // 2 < held[BudgetField.HELD_TOKENS] <= per_day and held.get(BudgetField.SPENT_TOKENS, 0) == 0
    )
    rescuer = WorkerProc(redis_url, env=env).start()
    try:
        rec = (await wait_all(p, [sub.run_id], 60))[sub.run_id]
    finally:
        rescuer.stop()
    assert rec.status.value == "completed", rec.result
    b = await budget_of(redis, "default")
    assert b[BudgetField.HELD_TOKENS] == 0 and b[BudgetField.RELEASED] == 1
    assert b[BudgetField.SPENT_TOKENS] == tokens(rec.result.usage)  # type: ignore[union-attr]


async def test_a_spent_day_is_a_429_budget_exhausted_until_midnight_utc(
    redis_url: str, tmp_path: Path
) -> None:
    path = profiles(tmp_path)
    quotas = orjson.dumps({"tenant-b": {"tokensPerDay": 100}}).decode()
    s = settings(redis_url, tenant_quotas=quotas, profiles=str(path))
    async with (
        api(s) as url,
        running_worker(redis_url, tenant_quotas=quotas, profiles=str(path), api_tokens=s.api_tokens),
        httpx.AsyncClient(base_url=url, headers=B) as cb,
        httpx.AsyncClient(base_url=url, headers=A) as ca,
    ):
        # Three calls of ~60 tokens' worst case each: the day affords one or two, then refuses.
        r = await cb.post("/v1/runs", json=small_run(2))
        assert r.status_code == 202, r.text
        run_id = r.json()["runId"]
        for _ in range(300):
            view = (await cb.get(f"/v1/runs/{run_id}")).json()
            if view["status"] in ("completed", "failed"):
                break
            await asyncio.sleep(0.05)
        assert view["status"] == "failed" and view["result"]["lastError"]["code"] == "budget_exceeded", view
        assert "tokensPerDay=100" in view["result"]["lastError"]["message"]
        r = await cb.post("/v1/runs", json=small_run(0))
        assert r.status_code == 429 and r.json()["error"]["code"] == "budget_exhausted", r.text
        midnight = (int(time.time()) // 86_400 + 1) * 86_400
        assert abs(int(r.headers["retry-after"]) - (midnight - time.time())) <= 5
        r = await cb.post("/v1/runs/batch", json={"runs": [small_run(0)]})
        assert r.status_code == 429 and r.json()["error"]["code"] == "budget_exhausted", r.text
        assert (await ca.post("/v1/runs", json=body())).status_code == 202  # another tenant is not affected


async def test_cost_per_day_holds_and_settles_in_nano_usd_and_expired_holds_are_released(
    redis: Redis, redis_url: str
) -> None:
    """The scripts alone (worker/adapters/budgets.py on a real Redis): costUsdPerDay counts each call's worst
    cost, a settlement replaces the hold by the actual cost exactly, an expired hold is released
    once, and a refusal says the figures."""
    from shared.partitions import Partitions
    from shared.quotas import Quotas
    from shared.scripts import Scripts
    from shared.settings import Settings
    from worker.adapters.budgets import TenantBudgets

    quotas = orjson.dumps({"t1": {"costUsdPerDay": 0.01}}).decode()
    budgets = TenantBudgets(
        Partitions.of_client(redis, 4), Scripts(redis), Quotas(Settings(tenant_quotas=quotas)), 200
    )
    assert budgets.limited("t1") and not budgets.limited("t2")
    first = await budgets.reserve("t1", "a", 100, 0.006)
    assert not isinstance(first, str)
    refused = await budgets.reserve("t1", "b", 100, 0.005)  # 0.006 held + 0.005 > 0.01
    assert isinstance(refused, str) and "costUsdPerDay=0.01" in refused and "held $0.006000" in refused
    await first.settle(40, 0.001)
    second = await budgets.reserve("t1", "c", 100, 0.005)  # 0.001 spent + 0.005 fits
    assert not isinstance(second, str)
    home = Partitions.of_client(redis, 4).home("t1")
    key = home.tenant_budget("t1", utc_day(now_ms()))
    got = {k.decode(): int(v) for k, v in (await redis.hgetall(key)).items()}
    assert got[BudgetField.SPENT_COST] == 1_000_000 and got[BudgetField.HELD_COST] == 5_000_000
    assert got[BudgetField.SPENT_TOKENS] == 40 and got[BudgetField.REFUSED] == 1
    await asyncio.sleep(0.3)  # the hold of "c" expires unsettled (a dead worker's)
    third = await budgets.reserve("t1", "d", 10, 0.008)  # fits only once "c" is released
    assert not isinstance(third, str)
    await second.settle(50, 0.002)  # late: its hold is gone, the call still counts
    got = {k.decode(): int(v) for k, v in (await redis.hgetall(key)).items()}
    assert got[BudgetField.RELEASED] == 1 and got[BudgetField.HELD_COST] == 8_000_000
    assert got[BudgetField.SPENT_COST] == 3_000_000 and got[BudgetField.SPENT_TOKENS] == 90


async def test_an_aborted_call_releases_its_hold_at_once(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    path = profiles(tmp_path)
    quotas = orjson.dumps({"default": {"tokensPerDay": 10_000}}).decode()
    p = producer_for(redis, redis_url, profiles=str(path))
    slow = {"agent": "small", "inputMessages": [{"role": "user", "content": "go"}],
            "runtimeHints": {"script": [{"text": "a slow answer", "delayMs": 20_000}]}}  # fmt: skip
    sub = await p.submit(slow)
    async with running_worker(redis_url, profiles=str(path), tenant_quotas=quotas):
        for _ in range(200):
            if (await budget_of(redis, "default")).get(BudgetField.HELD_TOKENS, 0) > 0:
                break
            await asyncio.sleep(0.05)
        assert (await budget_of(redis, "default"))[BudgetField.HELD_TOKENS] > 0
        await p.abort(sub.run_id)
        rec = (await wait_all(p, [sub.run_id], 10))[sub.run_id]
    assert rec.status.value == "aborted"
    b = await budget_of(redis, "default")
    assert b[BudgetField.HELD_TOKENS] == 0 and b.get(BudgetField.RELEASED, 0) == 0  # released, not expired


async def test_in_the_runs_slot_the_settlement_goes_with_the_replys_commit(
    redis: Redis, redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One partition: the tenant's budget shares the run's slot, so no call settles by a round trip
    of its own (budget_settle.lua): each reply's commit writes its settlement (figure 3: 2 round
    trips a step for the run, plus the reserve)."""
    from worker.adapters import budgets as budgets_mod

    own: list[str] = []
    real = budgets_mod.RedisBudgetHold.settle

    async def counted(self: Any, tokens: int, cost_usd: float | None) -> None:
        own.append(self._member)
        await real(self, tokens, cost_usd)

    monkeypatch.setattr(budgets_mod.RedisBudgetHold, "settle", counted)
    path = profiles(tmp_path)
    quotas = orjson.dumps({"default": {"tokensPerDay": 100_000}}).decode()
    p = producer_for(redis, redis_url, profiles=str(path))
    sub = await p.submit(small_run(2))
    async with running_worker(redis_url, profiles=str(path), tenant_quotas=quotas):
        rec = (await wait_all(p, [sub.run_id], 30))[sub.run_id]
    assert rec.status.value == "completed" and own == []
    b = await budget_of(redis, "default")
    assert b[BudgetField.SPENT_TOKENS] == tokens(rec.result.usage) and b[BudgetField.HELD_TOKENS] == 0  # type: ignore[union-attr]


async def test_a_reply_whose_commit_is_refused_still_settles_its_hold(redis: Redis, redis_url: str) -> None:
    """In the run's slot a reply's settlement rides on its commit. When that commit is refused (the
    worker lost its lease, or the run ended from outside, while the reply came in), the call was
    still made: its tokens count, and its hold goes now rather than at its expiry."""
    from shared.quotas import Quotas
    from shared.scripts import Scripts
    from shared.settings import Settings
    from tests.integration.helpers import script_run
    from tests.support.schema import parts_of
    from worker.adapters.budgets import TenantBudgets
    from worker.adapters.redis_store import RedisRunStore
    from worker.adapters.worker_beat import beat
    from worker.core.acquisition import Acquired
    from worker.core.commit_step import CommitStep, Outbox
    from worker.core.store_errors import FencedError

    s = Settings(redis_url=redis_url, lease_ms=30_000,
                 tenant_quotas=orjson.dumps({"default": {"tokensPerDay": 10_000}}).decode())  # fmt: skip
    scripts = Scripts.for_settings(redis, s)
    await producer_for(redis, redis_url).submit(script_run([{"text": "x"}], runId="refused-1"))
    await beat(parts_of(redis), scripts, "w1", s.lease_ms, register=True)
    store = RedisRunStore(parts_of(redis), scripts, s, K, "refused-1")
    assert isinstance(await store.acquire(1, "w1"), Acquired)
    budgets = TenantBudgets(parts_of(redis), scripts, Quotas(s), hold_ms=600_000)
    hold = await budgets.reserve("default", "h1", 500, None)
    assert not isinstance(hold, str) and hold.slot == store.slot  # settled with the commit, normally
    assert (await budget_of(redis, "default"))[BudgetField.HELD_TOKENS] == 500
    await redis.delete(K.worker_lease("w1"))  # its lease runs out while the model replies
    event = ("status", 1, orjson.dumps({"status": "running"}))
    with pytest.raises(FencedError):
        await store.commit(CommitStep(Outbox([event], settle=hold.settlement(120, None))))
    b = await budget_of(redis, "default")
    assert b[BudgetField.HELD_TOKENS] == 0 and b[BudgetField.SPENT_TOKENS] == 120
    assert b.get(BudgetField.RELEASED, 0) == 0  # settled, not released at its expiry


async def test_a_call_counted_past_its_hold_scales_the_days_later_holds(redis: Redis) -> None:
    """The scripts alone: a settlement of three times the hold sets the day's over-count to 3000 (per
    mille), later holds are three times their bound, and a refusal says so; a call within its hold
    changes nothing."""
    from shared.partitions import Partitions
    from shared.quotas import Quotas
    from shared.scripts import Scripts
    from shared.settings import Settings
    from worker.adapters.budgets import TenantBudgets

    quotas = orjson.dumps({"t1": {"tokensPerDay": 1_000}}).decode()
    budgets = TenantBudgets(
        Partitions.of_client(redis, 4), Scripts(redis), Quotas(Settings(tenant_quotas=quotas)), 60_000
    )
    key = Partitions.of_client(redis, 4).home("t1").tenant_budget("t1", utc_day(now_ms()))

    async def budget() -> dict[str, int]:
        return {k.decode(): int(v) for k, v in (await redis.hgetall(key)).items()}

    first = await budgets.reserve("t1", "a", 100, None)
    assert not isinstance(first, str)
    await first.settle(300, None)  # the provider counted three times the bound
    b = await budget()
    assert b[BudgetField.OVERCOUNT] == 3_000 and b[BudgetField.SPENT_TOKENS] == 300
    second = await budgets.reserve("t1", "b", 100, None)
    assert not isinstance(second, str)
    assert (await budget())[BudgetField.HELD_TOKENS] == 300
    await second.settle(250, None)  # within its scaled hold: the ratio stays
    b = await budget()
    assert b[BudgetField.OVERCOUNT] == 3_000 and b[BudgetField.HELD_TOKENS] == 0
    refused = await budgets.reserve("t1", "c", 200, None)  # 550 spent + 600 > 1,000
    assert isinstance(refused, str) and "reserves 600 (3x its bound" in refused
