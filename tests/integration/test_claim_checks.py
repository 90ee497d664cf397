"""A claimed run's reconciler check (the live index), against a real Redis: a claim without a lease id
moves it to one lease from now (the run is taken later); a claim that takes the run takes it off
the index; one whose acquisition is refused leaves it where it was (no command spent on it)."""

from __future__ import annotations

from typing import Any

import pytest
from redis.asyncio import Redis

from shared.fields import RunField
from shared.scripts import Scripts
from shared.settings import Settings
from tests.integration.helpers import producer_for, script_run
from tests.support.schema import K, parts_of
from worker.adapters.worker_beat import beat

pytestmark = pytest.mark.integration

CHECK_MS = 5_000  # the claim's "one lease from now", well before a queued run's check


async def claim(redis: Redis, lease_id: str, job_id: str) -> tuple[int, list[Any]]:
    """Redis's time (ms) and claim_jobs' reply for ``job_id`` under ``lease_id`` ('' = claim only)."""
    t = await redis.time()
    now_ms = int(t[0]) * 1000 + int(t[1]) // 1000
    args = [now_ms, 86_400_000, 10, K.in_progress_key(""), CHECK_MS, 0, "", lease_id, job_id]
    scripts = Scripts.for_settings(redis, Settings())
    return now_ms, await scripts.claim_jobs(*scripts.frame(K, [], args))


async def test_a_claims_live_index_check_is_moved_only_for_a_run_taken_later(
    redis: Redis, redis_url: str
) -> None:
    p = producer_for(redis, redis_url)
    a, b, c = (s.run_id for s in await p.submit_many([script_run([{"text": "x"}])] * 3))
    queued = {r: await redis.zscore(K.live, r) for r in (a, b, c)}
    await beat(parts_of(redis), Scripts.for_settings(redis, Settings()), "w-1", 60_000, register=True)

    now_ms, reply = await claim(redis, "", K.job_id(a, 1))
    assert reply[2] == [] and await redis.zscore(K.live, a) == now_ms + CHECK_MS < (queued[a] or 0)

    _, reply = await claim(redis, "w-1", K.job_id(b, 1))
    assert reply[2][0] == b"ok" and await redis.zscore(K.live, b) is None

    await redis.hset(K.run(c), RunField.GEN, 2)  # its job of gen 1 is stale: re-dispatched meanwhile
    _, reply = await claim(redis, "w-1", K.job_id(c, 1))
    assert reply[2][0] == b"superseded" and await redis.zscore(K.live, c) == queued[c]
