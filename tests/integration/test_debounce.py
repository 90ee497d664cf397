"""Debounce keys (RunInput.debounce) on a real Redis with a worker: submissions of one key within its
period replace the run waiting to start (it ends superseded, still readable, naming its successor); the
last starts a period after its own submission, with its own input."""

from __future__ import annotations

import asyncio
import itertools
import time
from typing import Any

import pytest
from redis.asyncio import Redis

from producer.listing import Catalog, RunFilter
from producer.service import SubmissionError
from shared import keys
from shared.quotas import DEFAULT_TENANT
from tests.integration.helpers import producer_for, running_worker, script_run, stream, wait_all

pytestmark = pytest.mark.integration


def debounced(key: str, answer: str, period_ms: int = 1000, **extra: Any) -> dict[str, Any]:
    return script_run([{"text": answer}], debounce={"key": key, "periodMs": period_ms}, **extra)


async def test_five_submissions_in_a_second_run_only_the_last(redis: Redis, redis_url: str) -> None:
    p = producer_for(redis, redis_url, partitions=4)
    async with running_worker(redis_url, partitions=4):
        ids, last_at = [], 0.0
        for i in range(5):
            ids.append((await p.submit(debounced("chat-42", f"answer {i}"))).run_id)
            last_at = time.time()
            await asyncio.sleep(0.2)
        other = (await p.submit(debounced("chat-7", "other"))).run_id  # another key: its own run
        done = await wait_all(p, [*ids, other], 15)
    superseded = [done[r] for r in ids[:4]]
    assert {(r.status.value, r.result.last_error.code) for r in superseded} == {("superseded", "superseded")}  # type: ignore[union-attr]
    for rid, after in itertools.pairwise(ids):  # each names the run that replaced it
        err = done[rid].result.last_error  # type: ignore[union-attr]
        assert err is not None and after in err.message, err
    survivor = done[ids[4]]
    assert survivor.status.value == "completed"
    assert survivor.result is not None and survivor.result.final_assistant_message is not None
    assert survivor.result.final_assistant_message.content == "answer 4"  # the last input
    assert done[other].status.value == "completed"
    # it started a period after the last submission, not before
    part = p.parts.layout.home(keys.debounce_home("chat-42"))
    assert await redis.exists(part.run(ids[4])) == 1  # every run of the key lives at the key's home
    events = [e for e in await stream_at(redis, part, ids[4])]
    assert events[0].ts / 1000 >= last_at + 1.0 - 0.05
    for rid in ids[:4]:  # the superseded never ran: no running status, and their stream ends superseded
        seen = [e.payload.get("status") for e in await stream_at(redis, part, rid)]
        assert "running" not in seen and seen[-1] == "superseded", seen
    listed, _ = await Catalog(p).list_runs(DEFAULT_TENANT, RunFilter(status="superseded"))
    assert {r["runId"] for r in listed} == set(ids[:4])  # a status of its own in the listing


async def stream_at(redis: Redis, part: keys.Partition, run_id: str) -> list[Any]:
    from shared.events import decode_entry

    return [decode_entry(run_id, f) for _, f in await redis.xrange(part.events(run_id))]


async def test_a_submission_after_the_period_is_a_run_of_its_own(redis: Redis, redis_url: str) -> None:
    p = producer_for(redis, redis_url)
    async with running_worker(redis_url):
        first = (await p.submit(debounced("k", "one", period_ms=200))).run_id
        await asyncio.sleep(0.6)  # due and started (or ended): no longer waiting to start
        second = (await p.submit(debounced("k", "two", period_ms=200))).run_id
        done = await wait_all(p, [first, second], 10)
    assert [done[r].status.value for r in (first, second)] == ["completed", "completed"]
    assert len(await stream(redis, first)) > 1


async def test_a_debounced_run_is_scheduled_and_its_combinations_are_refused(
    redis: Redis, redis_url: str
) -> None:
    p = producer_for(redis, redis_url)
    sub = await p.submit(debounced("v", "x", period_ms=60_000))
    rec = await p.get(sub.run_id)
    assert rec is not None and rec.status.value == "scheduled"
    assert rec.run_at_ms is not None and rec.run_at_ms - rec.created_at_ms == 60_000
    for extra in (
        {"sessionId": "s1", "autoCreateSession": True},
        {"runAt": 1},
        {"concurrency": {"key": "c", "limit": 1}},
    ):
        with pytest.raises(SubmissionError) as exc:
            await p.submit(debounced("v", "x", **extra))
        assert exc.value.status == 422 and "debounce" in exc.value.message, exc.value.message
    with pytest.raises(SubmissionError) as exc:
        await p.submit(script_run([{"text": "x"}], debounce={"key": "v", "periodMs": 0}))
    assert exc.value.status == 422 and exc.value.field == "debounce.periodMs"


async def test_a_batch_with_one_debounce_key_keeps_its_last_item(redis: Redis, redis_url: str) -> None:
    p = producer_for(redis, redis_url)
    subs = await p.submit_many([debounced("b", f"item {i}", period_ms=300) for i in range(4)])
    ids = [s.run_id for s in subs]  # type: ignore[union-attr]
    async with running_worker(redis_url):
        done = await wait_all(p, ids, 10)
    assert [done[r].status.value for r in ids] == ["superseded"] * 3 + ["completed"]
