"""Fair dispatch within one claim: tenants take turns, against a real Redis (and a real worker)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from redis.asyncio import Redis

from shared.scripts import Scripts
from shared.settings import Settings
from tests.integration.helpers import producer_for, running_worker, script_run, stream
from tests.support.schema import K, stored

pytestmark = pytest.mark.integration


def kept(run_id: str, tenant: str) -> str:
    return stored(Settings(), tenant, run_id)


async def claim(redis: Redis, limit: int) -> list[str]:
    """One claim as a worker's poll makes it (no ids: the script picks), claimed only: the job ids
    in the reply's order."""
    t = await redis.time()
    now_ms = int(t[0]) * 1000 + int(t[1]) // 1000
    args = [now_ms, 86_400_000, limit, K.in_progress_key(""), 30_000, 0, "", ""]
    scripts = Scripts(redis)
    reply: list[Any] = await scripts.claim_jobs(*scripts.frame(K, [], args))
    return [r.decode() for r in reply[::3]]


async def test_tenants_take_turns_within_one_claim_and_each_keeps_its_own_order(
    redis: Redis, redis_url: str
) -> None:
    # Tenant A's burst of twelve jobs is ahead of tenant B's two in the queue; a claim of eight takes
    # A's first, B's first, A's second, B's second, then A's in their order. B's are not left for a
    # later claim, nor started after A's burst. Each tenant's own jobs keep their queue order,
    # priority first (A's last job, priority 9, is its first; jobs due in the same millisecond are in
    # id order).
    p = producer_for(redis, redis_url)
    a = [(await p.submit(script_run([{"text": "a"}]), tenant="tenant-a")).run_id for _ in range(11)]
    b = [(await p.submit(script_run([{"text": "b"}]), tenant="tenant-b")).run_id for _ in range(2)]
    urgent = (await p.submit(script_run([{"text": "a"}], priority=9), tenant="tenant-a")).run_id
    queue = [m.decode() for m in await redis.zrange(K.queue, 0, -1)]
    a_jobs = [j for j in queue if j in {K.job_id(kept(r, "tenant-a"), 1) for r in [urgent, *a]}]
    b_jobs = [j for j in queue if j in {K.job_id(kept(r, "tenant-b"), 1) for r in b}]
    assert a_jobs[0] == K.job_id(kept(urgent, "tenant-a"), 1)  # its priority first
    assert queue.index(b_jobs[0]) > 8  # behind a whole batch of A's
    first = await claim(redis, 8)
    assert first == [a_jobs[0], b_jobs[0], a_jobs[1], b_jobs[1], *a_jobs[2:6]]
    # A tenant alone claims in queue order, as much as the claim takes.
    assert await claim(redis, 8) == a_jobs[6:]
    assert await redis.zcard(K.queue) == 0


async def test_a_burst_of_one_tenant_does_not_hold_another_tenants_run_out_of_the_first_batch(
    redis: Redis, redis_url: str
) -> None:
    # A worker with eight slots; tenant A's twelve slow runs are due ahead of tenant B's quick one.
    # B's run starts with the worker's first claim, not once a slot of A's frees.
    p = producer_for(redis, redis_url)
    slow = script_run([{"text": "slow", "delayMs": 1500}])
    a = [(await p.submit(slow, tenant="tenant-a")).run_id for _ in range(12)]
    b = (await p.submit(script_run([{"text": "quick"}]), tenant="tenant-b")).run_id
    async with running_worker(redis_url, max_jobs=8, claim_batch=8):
        rec = await p.wait(b, timeout_s=30, tenant="tenant-b")
        assert rec is not None and rec.status == "completed"
        b_started = (await stream(redis, kept(b, "tenant-b")))[0].ts
        a_ended = [await redis.hget(K.run(kept(r, "tenant-a")), "finishedAt") for r in a]
        await asyncio.gather(*(p.wait(r, timeout_s=30, tenant="tenant-a") for r in a))
    assert all(x is None or int(x) > b_started for x in a_ended)  # B started before any of A's ended
