"""Pool-wide provider limits (worker/adapters/limiter.py) against a real Redis and real worker processes."""

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
from tests.integration.helpers import (
    assert_clean_stream,
    http_get,
    metric_samples,
    producer_for,
    running_worker,
    stream,
    wait_all,
)
from tests.support.fake_openai import FakeOpenAI, Reply
from tests.support.procs import WorkerProc
from tests.support.redis_server import free_port
from tests.support.schema import K
from worker.adapters.limiter import ProviderLimiter

pytestmark = pytest.mark.integration
USER = {"inputMessages": [{"role": "user", "content": "hello"}]}


def profiles(tmp_path: Path, base_url: str, **provider: Any) -> Path:
    path = tmp_path / "profiles.json"
    path.write_bytes(orjson.dumps({"profiles": [{"name": "lim", "provider": {
        "kind": "openai", "baseUrl": base_url, "model": "fake-1", **provider}}]}))  # fmt: skip
    return path


def cfg(**kw: Any) -> ProviderConfig:
    return ProviderConfig.model_validate(
        {"kind": "openai", "baseUrl": "http://127.0.0.1:1/v1", "model": "m", **kw}
    )


async def test_max_concurrent_holds_across_two_worker_processes(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    fake = FakeOpenAI([Reply(text=f"answer {i} " * 4, pieces=4, chunk_delay_s=0.1) for i in range(8)])
    async with fake:
        path = profiles(tmp_path, fake.base_url, maxConcurrent=2)
        p = producer_for(redis, redis_url)
        p.profiles = load_profiles(str(path))
        ports = [free_port(), free_port()]
        env = {"AGENTMILL_PROFILES": str(path)}
        procs = [WorkerProc(redis_url, env={**env, "AGENTMILL_WORKER_METRICS_PORT": str(port)}).start()
                 for port in ports]  # fmt: skip
        try:
            subs = await p.submit_many([{"agent": "lim", **USER} for _ in range(8)])
            ids = [s.run_id for s in subs]  # type: ignore[union-attr]
            recs = await wait_all(p, ids, 60)
            scraped = [
                metric_samples((await asyncio.to_thread(http_get, f"http://127.0.0.1:{port}/metrics"))[1])
                for port in ports
            ]
        finally:
            for proc in procs:
                proc.stop()
    assert {r.status.value for r in recs.values()} == {"completed"}
    assert len(fake.requests) == 8
    assert fake.max_active == 2  # saturated, never exceeded (without the limiter: up to 8)
    waits = 0
    for rid in ids:
        events = await stream(redis, rid)
        assert_clean_stream(events)
        w = [e.payload for e in events if e.payload.get("status") == "waiting_for_capacity"]
        assert len(w) <= 1 and all(x["reason"] == "concurrency" for x in w)  # once per wait
        waits += len(w)
    assert waits >= 1
    count = sum(s.get(("agentmill_provider_capacity_wait_seconds_count", ()), 0) for s in scraped)
    throttled = sum(
        s.get(("agentmill_provider_throttled_total", (("reason", "concurrency"),)), 0) for s in scraped
    )
    assert count == 8 and throttled == waits
    assert (
        await redis.zcard(endpoint_keys.provider_slots_key(endpoint_keys.endpoint_hash(fake.base_url))) == 0
    )  # all freed


async def test_tokens_per_minute_are_honoured_within_a_window(redis: Redis) -> None:
    """Sliding window of 1 s (the production window is 60 s): 12 calls of 30 tokens, 100 a window."""
    lim = ProviderLimiter(Scripts(redis), window_ms=1_000)
    c = cfg(tokensPerMinute=100)
    grants: list[float] = []

    async def call() -> None:
        held = await lim.hold(c, 30)
        grants.append(time.monotonic())
        await held.release(None)

    t0 = time.monotonic()
    await asyncio.gather(*(call() for _ in range(12)))
    grants.sort()
    # At most 3 calls (90 tokens) start within any window; a little slack for the local clock.
    for i, t in enumerate(grants):
        assert sum(1 for u in grants[i:] if u - t < 0.95) <= 3, [round(g - t0, 3) for g in grants]
    assert grants[-1] - t0 >= 3.0  # 12 calls / 3 a window → at least three windows waited


async def test_actual_usage_replaces_the_estimate(redis: Redis) -> None:
    lim = ProviderLimiter(Scripts(redis), window_ms=60_000)
    c = cfg(tokensPerMinute=100)
    held = await lim.hold(c, 90)
    await held.release(10)  # the call used 10 tokens, not 90
    assert await lim.try_acquire(c, "other", 80) == (0, "ok")
    wait, reason = await lim.try_acquire(c, "third", 20)
    assert reason == "tokens" and 58_000 < wait <= 60_000


async def test_requests_per_minute(redis: Redis) -> None:
    lim = ProviderLimiter(Scripts(redis), window_ms=60_000)
    c = cfg(requestsPerMinute=2)
    assert (await lim.try_acquire(c, "a", 0))[0] == 0 and (await lim.try_acquire(c, "b", 0))[0] == 0
    wait, reason = await lim.try_acquire(c, "c", 0)
    assert reason == "requests" and 58_000 < wait <= 60_000


async def test_the_slot_of_a_holder_that_died_frees_itself(redis: Redis) -> None:
    lim = ProviderLimiter(Scripts(redis), lease_ms=400)
    c = cfg(maxConcurrent=1)
    assert await lim.try_acquire(c, "dead-worker", 0) == (0, "ok")  # never renewed nor released
    t0 = time.monotonic()
    held = await lim.hold(c, 0)
    assert 0.25 < time.monotonic() - t0 < 2.0
    await held.release(None)


async def test_a_live_holder_keeps_its_slot_past_the_lease(redis: Redis) -> None:
    lim = ProviderLimiter(Scripts(redis), lease_ms=300)
    c = cfg(maxConcurrent=1)
    held = await lim.hold(c, 0)
    await asyncio.sleep(0.8)  # renewed every 100 ms
    assert (await lim.try_acquire(c, "other", 0))[1] == "concurrency"
    await held.release(None)
    assert await lim.try_acquire(c, "other", 0) == (0, "ok")


async def test_a_429_with_retry_after_pauses_the_endpoint_for_every_run(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    fake = FakeOpenAI([Reply(status=429, headers={"Retry-After": "2"}, error="slow down"),
                       Reply(text="one"), Reply(text="two")])  # fmt: skip
    async with fake:
        path = profiles(tmp_path, fake.base_url)  # no limits declared: the pause still applies
        p = producer_for(redis, redis_url)
        p.profiles = load_profiles(str(path))
        async with running_worker(redis_url, profiles=str(path)) as wp:
            first = await p.submit({"agent": "lim", **USER})
            while not fake.requests:
                await asyncio.sleep(0.02)
            await asyncio.sleep(0.2)
            t0 = time.monotonic()
            second = await p.submit({"agent": "lim", **USER})
            recs = await wait_all(p, [first.run_id, second.run_id], 20)
            waited = time.monotonic() - t0
            body = wp.metrics.render()
    assert {r.status.value for r in recs.values()} == {"completed"}
    events = await stream(redis, second.run_id)
    w = [e.payload for e in events if e.payload.get("status") == "waiting_for_capacity"]
    assert [x["reason"] for x in w] == ["paused"] and 1_000 < w[0]["waitMs"] <= 2_000
    assert waited >= 1.5  # the second run, which never saw the 429, waited for the pause too
    samples = metric_samples(body.decode())
    assert samples[("agentmill_provider_throttled_total", (("reason", "http_429"),))] == 1
    assert samples[("agentmill_provider_throttled_total", (("reason", "paused"),))] >= 1


async def test_a_run_waiting_for_capacity_aborts_at_once(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    fake = FakeOpenAI([])
    async with fake:
        path = profiles(tmp_path, fake.base_url, maxConcurrent=1)
        lim = ProviderLimiter(Scripts(redis), lease_ms=60_000)
        assert await lim.try_acquire(ProviderConfig.model_validate(
            {"kind": "openai", "baseUrl": fake.base_url, "maxConcurrent": 1}), "someone-else", 0) == (0, "ok")  # fmt: skip
        p = producer_for(redis, redis_url)
        p.profiles = load_profiles(str(path))
        async with running_worker(redis_url, profiles=str(path)):
            sub = await p.submit({"agent": "lim", **USER})
            while not any(e.payload.get("status") == "waiting_for_capacity"
                          for e in (await stream(redis, sub.run_id) if await redis.exists(K.events(sub.run_id)) else [])):  # fmt: skip
                await asyncio.sleep(0.05)
            t0 = time.monotonic()
            assert await p.abort(sub.run_id) == "requested"
            rec = (await wait_all(p, [sub.run_id], 5))[sub.run_id]
            stopped = time.monotonic() - t0
    assert rec.status.value == "aborted" and stopped < 1.0 and not fake.requests
    slots = await redis.zrange(
        endpoint_keys.provider_slots_key(endpoint_keys.endpoint_hash(fake.base_url)), 0, -1
    )
    assert slots == [b"someone-else"]  # the aborted run took nothing


async def test_the_slot_of_a_killed_worker_frees_itself_and_another_worker_finishes(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    fake = FakeOpenAI([Reply(text="slow " * 100, pieces=100, chunk_delay_s=0.1), Reply(text="done")])
    async with fake:
        path = profiles(tmp_path, fake.base_url, maxConcurrent=1)
        env = {"AGENTMILL_PROFILES": str(path), "AGENTMILL_LEASE_MS": "1500", "AGENTMILL_HEARTBEAT_MS": "300",
               "AGENTMILL_RECONCILE_MS": "300", "AGENTMILL_PROVIDER_SLOT_LEASE_MS": "6000"}  # fmt: skip
        p = producer_for(redis, redis_url)
        p.profiles = load_profiles(str(path))
        victim = WorkerProc(redis_url, env=env).start()
        rescuer = None
        try:
            sub = await p.submit({"agent": "lim", **USER})
            deadline = time.monotonic() + 20
            while fake.active == 0 and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            await asyncio.sleep(0.5)  # mid-stream, the slot renewed at least once
            victim.kill()
            t_kill = time.monotonic()
            slots = endpoint_keys.provider_slots_key(endpoint_keys.endpoint_hash(fake.base_url))
            assert await redis.zcard(slots) == 1  # the dead worker's slot is still there
            rescuer = WorkerProc(redis_url, env=env).start()
            rec = (await wait_all(p, [sub.run_id], 30))[sub.run_id]
            took = time.monotonic() - t_kill
        finally:
            victim.kill()
            if rescuer is not None:
                rescuer.stop()
    assert rec.status.value == "completed" and rec.result.final_assistant_message.content == "done"  # type: ignore[union-attr]
    events = await stream(redis, sub.run_id)
    assert any(e.payload.get("status") == "model_call_restarted" for e in events)
    w = [e.payload for e in events if e.payload.get("status") == "waiting_for_capacity"]
    assert [x["reason"] for x in w] == ["concurrency"]
    assert took >= 4.0  # the slot was renewed within the last 2 s before the kill: it freed by expiry
    assert fake.max_active == 1 and await redis.zcard(slots) == 0
