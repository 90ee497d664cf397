"""Priority at the provider limiter (worker/adapters/limiter.py, capacity_acquire.lua) on a real Redis: calls
waiting for an endpoint's capacity are served by run priority with the queue's aging rule, not by
arrival; a waiter that stops asking or gives up leaves the line; and a run's priority reaches its
calls' place (a worker, a fake OpenAI server limited to 2 concurrent calls)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from redis.asyncio import Redis

from shared import endpoint_keys
from shared.profiles import load_profiles
from shared.provider_config import ProviderConfig
from shared.scripts import Scripts
from tests.integration.helpers import producer_for, running_worker, wait_all
from tests.support.fake_openai import FakeOpenAI, Reply
from tests.support.schema import K
from worker.adapters.limiter import ProviderLimiter

pytestmark = pytest.mark.integration


def cfg(**kw: Any) -> ProviderConfig:
    return ProviderConfig.model_validate(
        {"kind": "openai", "baseUrl": "http://127.0.0.1:1/v1", "model": "m", **kw}
    )


async def test_a_high_priority_call_passes_the_low_priority_calls_waiting_before_it(redis: Redis) -> None:
    lim = ProviderLimiter(Scripts(redis), poll_max_ms=200)
    c = cfg(maxConcurrent=2)
    granted: list[str] = []

    async def call(name: str, priority: int) -> None:
        held = await lim.hold(c, 0, priority=priority)
        granted.append(name)
        await asyncio.sleep(0.05)
        await held.release(None)

    low = [asyncio.create_task(call(f"low{i}", 2)) for i in range(30)]
    await asyncio.sleep(0.3)  # they all wait, two at a time going
    before = len(granted)
    t0 = time.monotonic()
    await call("high", 8)
    waited = time.monotonic() - t0
    await asyncio.gather(*low)
    # served within the two calls in flight and the one granted meanwhile: not behind the 20-odd
    # low-priority calls still waiting (about 0.5 s of them)
    assert granted.index("high") - before <= 3, granted
    assert waited < 0.25, waited
    endpoint = endpoint_keys.endpoint_hash(c.base_url or "")
    assert await redis.zcard(endpoint_keys.provider_waiting_key(endpoint)) == 0


async def test_a_call_that_waited_longer_than_the_aging_keeps_its_place(redis: Redis) -> None:
    lim = ProviderLimiter(Scripts(redis), aging_ms=50, poll_max_ms=100)
    c = cfg(maxConcurrent=1)
    first = await lim.hold(c, 0, priority=5)
    order: list[str] = []

    async def call(name: str, priority: int) -> None:
        held = await lim.hold(c, 0, priority=priority)
        order.append(name)
        await held.release(None)

    old = asyncio.create_task(call("old", 2))
    await asyncio.sleep(0.45)  # 9 quanta: more than (8 - 2) of them
    new = asyncio.create_task(call("new", 8))
    await asyncio.sleep(0.1)
    await first.release(None)
    await asyncio.gather(old, new)
    assert order == ["old", "new"]


async def test_a_waiter_that_stops_asking_or_gives_up_leaves_the_line(redis: Redis) -> None:
    lim = ProviderLimiter(Scripts(redis), poll_max_ms=100)  # a waiter is stale after 1.3 s
    c = cfg(maxConcurrent=1)
    endpoint = endpoint_keys.endpoint_hash(c.base_url or "")
    held = await lim.hold(c, 0, priority=5)
    # a dead worker's waiter at the head of the line: asked once, never again
    assert (await lim.try_acquire(c, "dead", 0, priority=9))[1] == "concurrency"
    gave_up = asyncio.create_task(lim.acquire(c, 0, priority=9))
    await asyncio.sleep(0.2)
    gave_up.cancel()
    with pytest.raises(asyncio.CancelledError):
        await gave_up
    assert await redis.zrange(endpoint_keys.provider_waiting_key(endpoint), 0, -1) == [b"dead"]
    await held.release(None)
    t0 = time.monotonic()
    again = await lim.hold(c, 0, priority=0)  # behind the dead one until it is stale
    assert 0.9 < time.monotonic() - t0 < 3.0
    await again.release(None)


async def test_a_runs_priority_orders_its_calls_at_the_limiter(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    n = 60
    fake = FakeOpenAI([Reply(text="low", pieces=2, chunk_delay_s=0.03) for _ in range(n + 1)])
    async with fake:
        path = tmp_path / "profiles.json"
        path.write_bytes(orjson.dumps({"profiles": [{"name": "lim", "provider": {
            "kind": "openai", "baseUrl": fake.base_url, "model": "fake-1", "maxConcurrent": 2}}]}))  # fmt: skip
        p = producer_for(redis, redis_url)
        p.profiles = load_profiles(str(path))
        user = {"agent": "lim", "inputMessages": [{"role": "user", "content": "hi"}]}
        async with running_worker(redis_url, profiles=str(path)):
            lows = [s.run_id for s in await p.submit_many([{**user, "priority": 2} for _ in range(n)])]  # type: ignore[union-attr]
            await asyncio.sleep(0.4)  # all running, most waiting for the provider
            t, _ = await redis.time()
            high_at = t * 1000
            high = (await p.submit({**user, "priority": 8})).run_id
            done = await wait_all(p, [high, *lows], 30)
    assert {r.status.value for r in done.values()} == {"completed"}
    finished = {r: int(await redis.hget(K.run(r), "finishedAt") or 0) for r in done}
    waiting = [r for r in lows if finished[r] > high_at]  # the lows still not done when it came
    ahead = [r for r in waiting if finished[r] < finished[high]]
    # Not behind the low-priority calls that were waiting before it: only the calls in flight (2 at
    # a time, each ~60 ms) while its own run is claimed, started and reaches the limiter end before
    # it (6 seen); by arrival, all the lows waiting (about 60) would.
    assert len(waiting) > 30 and len(ahead) <= 10, (len(waiting), len(ahead))
