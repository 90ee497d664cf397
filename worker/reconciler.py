"""The sweep that finds runs nobody is carrying and puts them back on the queue (or ends them).

Two sources. Every queued or waiting run has an entry in the live index (keys.LIVE) scored with the
time someone should look at it (a queued run whose job was never claimed, a claimed run never
acquired, an approval timeout). A running run is carried by its worker's lease (keys.WORKERS): when
a worker's lease expires, the sweep re-dispatches every run in its runs set. Each worker sweeps
every few seconds; the per-run script re-checks under Redis time and bumps the dispatch number, so
two sweeping workers never dispatch a run twice.
"""

from __future__ import annotations

from collections import Counter

from redis.asyncio import Redis

from shared import keys
from shared.clock import now_ms
from shared.dispatch import JOB_EXPIRE_MS, job_payload, job_ref
from shared.scripts import Scripts, text
from shared.settings import Settings
from worker.redis_store import forget_worker

__all__ = ["reconcile_once", "reconcile_worker"]


async def reconcile_once(
    redis: Redis, scripts: Scripts, settings: Settings, *, limit: int = 200
) -> Counter[str]:
    """One sweep: returns how many runs got each verdict (redispatched, alive, waiting, …)."""
    verdicts: Counter[str] = Counter()
    for w in await redis.zrangebyscore(keys.WORKERS, "-inf", now_ms(), start=0, num=20):
        verdicts += await reconcile_worker(redis, scripts, settings, text(w))
    due = await redis.zrangebyscore(keys.LIVE, "-inf", now_ms(), start=0, num=limit)
    if due:
        verdicts += await _redispatch(redis, scripts, settings, [text(r) for r in due])
    return verdicts


async def reconcile_worker(
    redis: Redis, scripts: Scripts, settings: Settings, lease_id: str, *, expired_only: bool = True
) -> Counter[str]:
    """Re-dispatch the runs of a worker whose lease expired (or, ``expired_only=False``, that gave
    its lease up), then forget the worker once it holds none."""
    verdicts: Counter[str] = Counter()
    if not expired_only:
        await forget_worker(redis, scripts, lease_id, only_if_expired=False)
    for _ in range(100):  # a worker holds at most max_jobs runs; each pass takes up to 500
        members = await redis.srandmember(keys.worker_runs_key(lease_id), 500)  # type: ignore[misc]
        if not members:
            break
        got = await _redispatch(redis, scripts, settings, [text(r) for r in members], dead_worker=lease_id)
        verdicts += got
        if got.get("alive") or got.get("error"):  # renewed after all, or Redis trouble: next sweep
            return verdicts
    if await forget_worker(redis, scripts, lease_id, only_if_expired=expired_only) == "forgotten":
        verdicts["worker_expired"] += 1
    return verdicts


async def _redispatch(
    redis: Redis, scripts: Scripts, settings: Settings, run_ids: list[str], *, dead_worker: str = ""
) -> Counter[str]:
    verdicts: Counter[str] = Counter()
    async with redis.pipeline(transaction=False) as pipe:
        for rid in run_ids:
            pipe.hget(keys.run_key(rid), "gen")
        gens = await pipe.execute()
    async with redis.pipeline(transaction=False) as pipe:
        for rid, g in zip(run_ids, gens, strict=True):
            if g is None:
                pipe.zrem(keys.LIVE, rid)
                if dead_worker:
                    pipe.srem(keys.worker_runs_key(dead_worker), rid)
                continue
            gen = int(g)
            cur_job, cur_key = job_ref(rid, gen)
            new_job, new_key = job_ref(rid, gen + 1)
            await scripts.redispatch(
                keys=[keys.run_key(rid), keys.LIVE, keys.QUEUE, cur_key, keys.arq_in_progress_key(cur_job), new_key,
                      keys.events_stream(rid), keys.tools_key(rid)],
                args=[rid, gen, cur_job, new_job, job_payload(rid, gen + 1), JOB_EXPIRE_MS,
                      settings.queued_check_ms, settings.stream_maxlen, settings.retention_s, dead_worker],
                client=pipe,
            )  # fmt: skip
        replies = await pipe.execute(raise_on_error=False)
    for r in replies:
        if isinstance(r, Exception):
            verdicts["error"] += 1
        elif isinstance(r, list):
            verdicts[text(r[0])] += 1
    return verdicts
