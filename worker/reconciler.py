"""The sweep that finds runs nobody is carrying and puts them back on the queue (or ends them).

Every accepted, non-terminal run has an entry in the live index (keys.LIVE) scored with the time
someone should look at it: its lease expiry while running, a check time while queued. Each worker
sweeps the due entries every few seconds; the per-run script re-checks under Redis time and bumps
the dispatch number, so two sweeping workers never dispatch a run twice.
"""

from __future__ import annotations

from collections import Counter

from redis.asyncio import Redis

from shared import keys
from shared.dispatch import JOB_EXPIRE_MS, job_payload, job_ref
from shared.scripts import Scripts, text
from shared.settings import Settings
from worker.store import now_ms


async def reconcile_once(
    redis: Redis, scripts: Scripts, settings: Settings, *, limit: int = 200
) -> Counter[str]:
    """One sweep: returns how many runs got each verdict (redispatched, alive, waiting, …)."""
    due = await redis.zrangebyscore(keys.LIVE, "-inf", now_ms(), start=0, num=limit)
    verdicts: Counter[str] = Counter()
    if not due:
        return verdicts
    run_ids = [text(r) for r in due]
    async with redis.pipeline(transaction=False) as pipe:
        for rid in run_ids:
            pipe.hget(keys.run_key(rid), "gen")
        gens = await pipe.execute()
    async with redis.pipeline(transaction=False) as pipe:
        calls = 0
        for rid, g in zip(run_ids, gens, strict=True):
            if g is None:
                pipe.zrem(keys.LIVE, rid)
                continue
            gen = int(g)
            cur_job, cur_key = job_ref(rid, gen)
            new_job, new_key = job_ref(rid, gen + 1)
            await scripts.redispatch(
                keys=[keys.run_key(rid), keys.LIVE, keys.QUEUE, cur_key, keys.arq_in_progress_key(cur_job), new_key,
                      keys.events_stream(rid), keys.tools_key(rid)],
                args=[rid, gen, cur_job, new_job, job_payload(rid, gen + 1), JOB_EXPIRE_MS,
                      settings.queued_check_ms, settings.stream_maxlen, settings.retention_s],
                client=pipe,
            )  # fmt: skip
            calls += 1
        replies = await pipe.execute(raise_on_error=False)
    for r in replies:
        if isinstance(r, Exception):
            verdicts["error"] += 1
        elif isinstance(r, list):
            verdicts[text(r[0])] += 1
    return verdicts
