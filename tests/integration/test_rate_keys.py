"""Rate keys (RunInput.rate) on a real Redis with a worker: at most ``limit`` runs of a key start in
any period; the excess is delayed, not refused (scheduled at the key's next free start, the view
saying so), for single submissions and batches alike; a key's starts are counted at its home
whatever partition its runs live on."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import orjson
import pytest
from redis.asyncio import Redis

from producer.service import SubmissionError
from shared import keys
from tests.integration.api_support import A, api, run_body, settings
from tests.integration.helpers import producer_for, running_worker, script_run, wait_all

pytestmark = pytest.mark.integration


def rated(key: str, limit: int = 3, period_s: int = 1, **extra: Any) -> dict[str, Any]:
    return script_run([{"text": "ok"}], rate={"key": key, "limit": limit, "periodS": period_s}, **extra)


async def first_event_ms(redis: Redis, part: keys.Partition, run_id: str) -> int:
    entries = await redis.xrange(part.events(run_id), count=1)
    return int(entries[0][1][b"ts"])


async def test_a_keys_starts_per_period_hold_and_the_excess_is_delayed(redis: Redis, redis_url: str) -> None:
    p = producer_for(redis, redis_url, partitions=4)
    async with running_worker(redis_url, partitions=4):  # idle: a run starts when its key lets it
        subs = [await p.submit(rated("cust-9")) for _ in range(8)]
        free = await p.submit(rated("cust-1"))  # another key: not delayed by cust-9's
        ids = [s.run_id for s in subs]
        recs = [await p.get(r) for r in ids]
        assert [r.status.value for r in recs[3:]] == ["scheduled"] * 5  # type: ignore[union-attr]
        assert recs[3].view()["waitingFor"] == "rate:cust-9"  # type: ignore[union-attr]
        assert (await p.get(free.run_id)).run_at_ms is None  # type: ignore[union-attr]
        done = await wait_all(p, ids, 15)
    assert {r.status.value for r in done.values()} == {"completed"}
    assert "waitingFor" not in (await p.get(ids[3])).view()  # type: ignore[union-attr]
    # the starts the key gave (kept at its home) hold the rate, a delayed run's runAt is its start,
    # and no run started before the start it was given
    layout = p.parts.layout
    home = layout.home(keys.rate_home("cust-9"))
    given = {
        k.decode(): int(v)
        for k, v in await redis.zrange(home.rate_key("default", "cust-9"), 0, -1, withscores=True)
    }
    assert set(given) == set(ids)
    assert all(given[r.run_id] == r.run_at_ms for r in recs[3:])  # type: ignore[union-attr]
    started = {r: await first_event_ms(redis, layout.home(r), r) for r in ids}
    assert all(started[r] >= given[r] - 5 for r in ids), (started, given)
    at = sorted(given.values())
    for i in range(len(at) - 3):  # any 4 consecutive starts span at least a period
        assert at[i + 3] - at[i] >= 1000, at


async def test_a_batch_is_spread_and_a_resubmission_keeps_its_start(redis: Redis, redis_url: str) -> None:
    p = producer_for(redis, redis_url)
    subs = await p.submit_many([rated("b", limit=2, period_s=10, runId=f"r{i}") for i in range(6)])
    assert all(not isinstance(s, SubmissionError) for s in subs), subs
    ats = [(await p.get(f"r{i}")).run_at_ms for i in range(6)]  # type: ignore[union-attr]
    assert ats[:2] == [None, None] and ats[2] == ats[3] and ats[4] == ats[5]
    assert ats[4] - ats[2] == 10_000  # type: ignore[operator]
    again = await p.submit(rated("b", limit=2, period_s=10, runId="r5"))  # the same run sent again
    assert not again.created and (await p.get("r5")).run_at_ms == ats[5]  # type: ignore[union-attr]
    nxt = await p.submit(rated("b", limit=2, period_s=10, runId="r6"))
    assert (await p.get(nxt.run_id)).run_at_ms == ats[4] + 10_000  # type: ignore[operator,union-attr]


async def test_a_keys_starts_ahead_are_bounded_and_combinations_refused(redis: Redis, redis_url: str) -> None:
    p = producer_for(redis, redis_url, key_max_waiting=3)
    for _ in range(3):
        await p.submit(rated("full", limit=1, period_s=60))
    with pytest.raises(SubmissionError) as exc:
        await p.submit(rated("full", limit=1, period_s=60))
    assert (exc.value.status, exc.value.code, exc.value.field) == (429, "rate_full", "rate.key")
    batch = await p.submit_many([rated("full", limit=1, period_s=60), rated("other", limit=1, period_s=60)])
    assert isinstance(batch[0], SubmissionError) and batch[0].field == "runs.0.rate.key"
    assert not isinstance(batch[1], SubmissionError)
    for extra in ({"sessionId": "s1", "autoCreateSession": True}, {"runAt": 1}):
        with pytest.raises(SubmissionError) as exc:
            await p.submit(rated("x", **extra))
        assert exc.value.status == 422 and "rate" in exc.value.message, exc.value.message
    with pytest.raises(SubmissionError) as exc:
        await p.submit(rated("x", limit=0))
    assert exc.value.status == 422 and exc.value.field == "rate.limit"


async def test_rate_and_concurrency_keys_together(redis: Redis, redis_url: str) -> None:
    # the rate key delays the start; once due, the concurrency key's slot decides
    p = producer_for(redis, redis_url)
    body = script_run([{"text": "ok", "delayMs": 100}], rate={"key": "r", "limit": 2, "periodS": 1},
                      concurrency={"key": "c", "limit": 1})  # fmt: skip
    ids = [(await p.submit(body)).run_id for _ in range(4)]
    async with running_worker(redis_url):
        done = await wait_all(p, ids, 15)
        await asyncio.sleep(0)
    assert {r.status.value for r in done.values()} == {"completed"}


async def test_an_api_submission_keeps_its_rate_key(redis_url: str) -> None:
    """RunInput.rate holds for a submission through the API (audited, with quotas or without): the
    run beyond the key's limit is delayed, not started at once."""
    rated = {**run_body(), "rate": {"key": "k1", "limit": 1, "periodS": 60}}
    quotas = orjson.dumps({"tenant-b": {"maxActive": 0, "submitsPerSecond": 0}}).decode()
    async with api(settings(redis_url, tenant_quotas=quotas)) as url:
        for headers in (A, {"Authorization": "Bearer tok-b"}):  # the default quotas; none
            async with httpx.AsyncClient(base_url=url, headers=headers) as c:
                answers = [(await c.post("/v1/runs", json=rated)).json() for _ in range(2)]
                assert [a["status"] for a in answers] == ["queued", "scheduled"], answers
                view = (await c.get(f"/v1/runs/{answers[1]['runId']}")).json()
                assert view["waitingFor"] == "rate:k1", view
