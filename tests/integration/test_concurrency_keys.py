"""Concurrency keys (RunInput.concurrency) on a real Redis: at most ``limit`` runs of a key hold a
slot at once pool-wide (sampled from the run hashes while real worker processes run them), the
others wait queued off the queue (``waitingFor``) and go in order as slots free up, whatever ends a
run; runs of other keys pass a saturated key by; the bounds refuse with a clear 4xx."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any

import pytest
from redis.asyncio import Redis

from producer.service import SubmissionError
from shared import keys
from shared.fields import RunField
from shared.quotas import Quotas
from shared.settings import Settings
from tests.integration.helpers import producer_for, running_worker, script_run, until_status, wait_all
from tests.support.procs import workers
from tests.support.schema import K

pytestmark = pytest.mark.integration

F = RunField
PARTITIONS = 4  # a key's runs live on its home partition: several partitions make that matter


def keyed(key: str, limit: int | None = 2, script: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    conc: dict[str, Any] = {"key": key} if limit is None else {"key": key, "limit": limit}
    return script_run(script or [{"text": "ok", "delayMs": 100}], concurrency=conc)


async def running_per_key(
    redis: Redis, layout: keys.Layout, where: dict[str, tuple[keys.Partition, str]]
) -> Counter[str]:
    """How many runs of each key are running now, from the run hashes (one pipelined read)."""
    async with redis.pipeline(transaction=False) as pipe:
        for rid, (part, _) in where.items():
            pipe.hget(part.run(rid), F.STATUS)
        statuses = await pipe.execute()
    return Counter(key for (_, key), st in zip(where.values(), statuses, strict=True) if st == b"running")


async def keys_hold_with_real_workers(redis: Redis, redis_url: str, n_keys: int, per_key: int) -> None:
    """``n_keys * per_key`` runs over ``n_keys`` keys of limit 2 on three worker processes, and one
    hot key with 20 runs of 300 ms submitted first: never more than 2 running per key (sampled every 10 ms),
    all complete, and every run of the other keys ends while the hot key still has runs waiting."""
    p = producer_for(redis, redis_url, partitions=PARTITIONS)
    layout = p.parts.layout
    hot = [keyed("hot", script=[{"text": "slow", "delayMs": 300}]) for _ in range(20)]
    others = [keyed(f"user-{i % n_keys}") for i in range(n_keys * per_key)]
    subs = await p.submit_many(hot + others)
    where: dict[str, tuple[keys.Partition, str]] = {}
    for sub, body in zip(subs, hot + others, strict=True):
        assert not isinstance(sub, SubmissionError), sub
        where[sub.run_id] = (
            layout.home(keys.conc_home(body["concurrency"]["key"])),
            body["concurrency"]["key"],
        )
    hot_ids = [s.run_id for s in subs[: len(hot)]]  # type: ignore[union-attr]
    other_ids = [s.run_id for s in subs[len(hot) :]]  # type: ignore[union-attr]
    # every run of a key lives on the key's home partition
    for rid, (part, _) in where.items():
        assert await redis.exists(part.run(rid)) == 1, rid
    peak: Counter[str] = Counter()
    stop = asyncio.Event()

    async def sample() -> None:
        while not stop.is_set():
            for key, n in (await running_per_key(redis, layout, where)).items():
                peak[key] = max(peak[key], n)
            await asyncio.sleep(0.01)

    sampler = asyncio.create_task(sample())
    env = {"AGENTMILL_PARTITIONS": str(PARTITIONS), "AGENTMILL_MAX_JOBS": "20"}
    try:
        with workers(redis_url, 3, env=env):
            done = await wait_all(p, other_ids, 120)
            assert {r.status.value for r in done.values()} == {"completed"}
            hot_left = sum(
                [await redis.hget(where[r][0].run(r), F.STATUS) == b"queued" for r in hot_ids]  # type: ignore[misc]
            )
            assert hot_left > 0, (
                "the hot key's runs should still be waiting: 20 runs of 300 ms, two at a time"
            )
            ended = await wait_all(p, hot_ids, 120)
            assert {r.status.value for r in ended.values()} == {"completed"}
    finally:
        stop.set()
        await sampler
    assert peak["hot"] == 2, peak
    assert max(peak.values()) <= 2, peak
    assert len(peak) > n_keys // 2, peak  # the sampler saw most keys running
    for part in layout.parts:  # every slot let go
        assert await redis.zcard(part.conc_running("default", "hot")) == 0
        assert await redis.zcard(part.conc_waiting("default", "hot")) == 0


async def test_a_keys_limit_holds_across_worker_processes_and_other_keys_pass_it_by(
    redis: Redis, redis_url: str
) -> None:
    await keys_hold_with_real_workers(redis, redis_url, n_keys=15, per_key=6)


@pytest.mark.slow
async def test_300_runs_over_30_keys_of_limit_2_on_3_workers(redis: Redis, redis_url: str) -> None:
    await keys_hold_with_real_workers(redis, redis_url, n_keys=30, per_key=10)


async def test_a_waiting_run_shows_why_and_any_ending_releases_the_next_in_order(
    redis: Redis, redis_url: str
) -> None:
    p = producer_for(redis, redis_url)
    stall, done_script = [{"stall": True}], [{"text": "done"}]
    line = []
    for script in (stall, stall, done_script, done_script):
        line.append(await p.submit(keyed("k", limit=1, script=script)))
        await asyncio.sleep(0.003)  # in submission order (within one millisecond: in run-id order)
    first, second, third, fourth = line
    other = await p.submit(keyed("other", limit=1, script=[{"text": "done"}]))
    async with running_worker(redis_url):
        await until_status(redis, first.run_id, "running")
        assert (await wait_all(p, [other.run_id], 10))[other.run_id].status.value == "completed"
        rec = await p.get(second.run_id)
        assert rec is not None and rec.status.value == "queued"
        assert rec.view()["waitingFor"] == "concurrency:k"
        assert (await p.get(first.run_id)).view().get("waitingFor") is None  # type: ignore[union-attr]
        # aborting a waiting run takes it out of the line: the third is next, not it
        await p.abort(third.run_id, reason="not needed")
        # the running one ends from outside (abort): the second takes its slot
        await p.abort(first.run_id, reason="stop")
        await until_status(redis, second.run_id, "running")
        assert (await p.get(second.run_id)).view().get("waitingFor") is None  # type: ignore[union-attr]
        assert await redis.hget(K.run(fourth.run_id), F.STATUS) == b"queued"
        await p.abort(second.run_id, reason="stop")
        done = await wait_all(p, [fourth.run_id], 10)
    assert done[fourth.run_id].status.value == "completed"
    assert (await p.get(third.run_id)).status.value == "aborted"  # type: ignore[union-attr]
    assert await redis.zcard(K.conc_running("default", "k")) == 0
    assert await redis.zcard(K.conc_waiting("default", "k")) == 0


async def test_a_scheduled_keyed_run_waits_for_a_slot_when_due(redis: Redis, redis_url: str) -> None:
    p = producer_for(redis, redis_url)
    holder = await p.submit(keyed("s", limit=1, script=[{"stall": True}]))
    later = await p.submit(
        {**keyed("s", limit=1, script=[{"text": "late"}]), "runAt": int(time.time() * 1000) + 300}
    )
    async with running_worker(redis_url):
        await until_status(redis, holder.run_id, "running")
        await asyncio.sleep(0.8)  # due: it waits for the slot, queued, not on the queue
        rec = await p.get(later.run_id)
        assert rec is not None and rec.status.value == "queued", rec
        assert rec.view()["waitingFor"] == "concurrency:s"
        assert await redis.zscore(K.live, later.run_id) is None  # no reconciler re-dispatch around the key
        await p.abort(holder.run_id, reason="stop")
        done = await wait_all(p, [later.run_id], 10)
    assert done[later.run_id].status.value == "completed"


async def test_the_limit_comes_from_the_run_or_the_tenants_quota(redis: Redis, redis_url: str) -> None:
    p = producer_for(redis, redis_url)
    with pytest.raises(SubmissionError) as exc:
        await p.submit(keyed("q", limit=None))
    assert (exc.value.status, exc.value.field) == (422, "concurrency.limit")
    q = Quotas(Settings(tenant_quotas='{"t1": {"concurrencyLimit": 3}}')).of("t1")
    a = await p.submit(keyed("q", limit=None), tenant="t1", quota=q)
    b = await p.submit(keyed("q", limit=10), tenant="t1", quota=q)  # lowered to the tenant's maximum
    c = await p.submit(keyed("q", limit=1), tenant="t1", quota=q)
    limits = []
    for sub in (a, b, c):
        rec = await p.get(sub.run_id, tenant="t1")
        assert rec is not None
        limits.append(await redis.hget(K.run(rec.key), F.CONC_LIMIT))
    assert limits == [b"3", b"3", b"1"]


async def test_a_keys_waiting_line_is_bounded_and_a_session_takes_no_key(
    redis: Redis, redis_url: str
) -> None:
    p = producer_for(redis, redis_url, key_max_waiting=2)
    for _ in range(3):  # one holds the slot, two wait
        await p.submit(keyed("full", limit=1))
    with pytest.raises(SubmissionError) as exc:
        await p.submit(keyed("full", limit=1))
    assert (exc.value.status, exc.value.code, exc.value.field) == (429, "concurrency_full", "concurrency.key")
    assert "AGENTMILL_KEY_MAX_WAITING" in exc.value.message
    await p.submit(keyed("another", limit=1))  # other keys are not affected
    with pytest.raises(SubmissionError) as exc:
        await p.submit({**keyed("s"), "sessionId": "ses-1", "autoCreateSession": True})
    assert exc.value.status == 422 and "concurrency" in exc.value.message
    with pytest.raises(SubmissionError) as exc:
        await p.submit(keyed("x" * 129))
    assert exc.value.status == 422 and exc.value.field == "concurrency.key"
