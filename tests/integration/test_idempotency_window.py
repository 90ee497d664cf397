"""The Idempotency-Key window (AGENTMILL_IDEMPOTENCY_TTL_S) on a real Redis: within it the key
answers with the run it made; after it, the same key makes a new run (the old one still readable);
unset, the key answers for as long as its run is kept."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from redis.asyncio import Redis

from tests.integration.api_support import A, api, run_body
from tests.integration.api_support import settings as api_settings
from tests.integration.helpers import producer_for, script_run

pytestmark = pytest.mark.integration


async def test_a_key_replays_within_its_window_and_makes_a_new_run_after(
    redis: Redis, redis_url: str
) -> None:
    p = producer_for(redis, redis_url, idempotency_ttl_s=1, partitions=4)
    first = await p.submit(script_run([{"text": "a"}]), idempotency_key="order-1")
    again = await p.submit(script_run([{"text": "a"}]), idempotency_key="order-1")
    other = await p.submit(script_run([{"text": "a"}]), idempotency_key="order-2")
    assert first.created and not again.created and again.run_id == first.run_id
    assert other.created and other.run_id != first.run_id
    await asyncio.sleep(1.2)
    later = await p.submit(script_run([{"text": "a"}]), idempotency_key="order-1")
    assert later.created and later.run_id != first.run_id
    assert (await p.get(first.run_id)) is not None  # the first run is still there
    replay = await p.submit(script_run([{"text": "a"}]), idempotency_key="order-1")
    assert not replay.created and replay.run_id == later.run_id


async def test_without_a_window_a_key_replays_while_its_run_is_kept(redis: Redis, redis_url: str) -> None:
    p = producer_for(redis, redis_url)
    first = await p.submit(script_run([{"text": "a"}]), idempotency_key="order-1")
    await asyncio.sleep(1.2)
    again = await p.submit(script_run([{"text": "a"}]), idempotency_key="order-1")
    assert not again.created and again.run_id == first.run_id


async def test_the_api_answers_200_within_the_window_and_202_after(redis_url: str) -> None:
    async with (
        api(api_settings(redis_url, idempotency_ttl_s=1)) as url,
        httpx.AsyncClient(base_url=url, headers=A, timeout=10) as http,
    ):
        h = {**A, "Idempotency-Key": "k-1"}
        r1 = await http.post("/v1/runs", json=run_body(), headers=h)
        r2 = await http.post("/v1/runs", json=run_body(), headers=h)
        assert (r1.status_code, r2.status_code) == (202, 200) and r1.json()["runId"] == r2.json()["runId"]
        await asyncio.sleep(1.2)
        r3 = await http.post("/v1/runs", json=run_body(), headers=h)
        assert r3.status_code == 202 and r3.json()["runId"] != r1.json()["runId"]
