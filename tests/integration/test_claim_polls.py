"""A worker draining a deep queue claims again without counting the due jobs first: the poll after one
that left due jobs behind goes straight to the claim (the script picks the jobs), one round trip
where a count and a claim made two."""

from __future__ import annotations

from typing import Any

import pytest
from redis.asyncio import Redis

from tests.integration.helpers import producer_for, running_worker, script_run, wait_all
from worker.process.arq_worker import ResilientWorker

pytestmark = pytest.mark.integration


async def test_a_worker_draining_a_deep_queue_claims_without_counting_first(
    redis: Redis, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    counts, claims = [0], [0]
    due_jobs, start_claimed = ResilientWorker._due_jobs, ResilientWorker._start_claimed

    async def counting(self: ResilientWorker, full: bool) -> Any:
        counts[0] += not full
        return await due_jobs(self, full)

    async def claiming(self: ResilientWorker, part: Any, reply: list[Any], lease_id: str) -> int:
        claims[0] += bool(reply)
        return await start_claimed(self, part, reply, lease_id)

    monkeypatch.setattr(ResilientWorker, "_due_jobs", counting)
    monkeypatch.setattr(ResilientWorker, "_start_claimed", claiming)
    p = producer_for(redis, redis_url)
    ids = [s.run_id for s in await p.submit_many([script_run([{"text": "hi", "delayMs": 30}])] * 200)]
    async with running_worker(redis_url, max_jobs=10, claim_batch=10):
        recs = await wait_all(p, ids, 30)
    assert {r.status.value for r in recs.values()} == {"completed"}
    # twenty claims of ten at least; each counted first was two round trips
    print(f"polls that counted first: {counts[0]}, claims: {claims[0]}")
    assert claims[0] >= 20 and counts[0] <= claims[0] // 2, (counts[0], claims[0])
