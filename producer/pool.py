"""The pool as an operator sees it (GET /v1/pool, the console's pool page): live workers with
their runs and lease age, queue depth per partition, and runs started and ended per minute over
the last hour (shared/pool_stats.py). Read from what the pool keeps in Redis anyway, in two
pipelined round trips per node, bounded whatever the pool's size."""

from __future__ import annotations

from typing import Any

from agentmill_client.pool import PoolAnswer, PoolMinute, PoolPartition, PoolWorker
from shared import keys
from shared.partitions import Partitions
from shared.pool_stats import FIELDS, WINDOW_MIN, minute_of
from shared.replies import text

__all__ = ["MAX_WORKERS", "read_pool"]

MAX_WORKERS = 500  # workers listed: the live ones, latest renewal first


async def read_pool(parts: Partitions[Any], *, now_ms: int, lease_ms: int) -> PoolAnswer:
    """The live workers and the queue sizes of every partition (with the minute hashes on
    partition 0), then each listed worker's run count on each partition."""
    first = parts.parts[0]
    minutes = [minute_of(now_ms) - i for i in range(WINDOW_MIN - 1, -1, -1)]

    def survey(pipe: Any, p: keys.Partition) -> None:
        pipe.zrevrangebyscore(p.workers, "+inf", now_ms, start=0, num=MAX_WORKERS, withscores=True)
        pipe.hvals(p.depth)  # queued jobs by priority, held-back ones included
        pipe.zcard(p.awaiting)
        if p is first:
            for m in minutes:
                pipe.hmget(p.pool_minute(m), FIELDS)

    replies = await parts.each(survey)
    expiry: dict[str, float] = {}
    for r in replies:
        for wid, score in r[0]:
            w = text(wid)
            expiry[w] = min(expiry.get(w, score), score)  # the partition it renewed least recently
    per_minute = [
        PoolMinute(minute=m * 60_000, **{f: int(c or 0) for f, c in zip(FIELDS, counts, strict=True)})
        for m, counts in zip(minutes, replies[0][3:], strict=True)
    ]

    ids = sorted(expiry, key=lambda w: -expiry[w])[:MAX_WORKERS]

    def runs(pipe: Any, p: keys.Partition) -> None:
        for w in ids:
            pipe.scard(p.worker_runs(w))

    held = await parts.each(runs) if ids else [[] for _ in parts.parts]
    partitions = [
        PoolPartition(
            index=p.index,
            queued=sum(max(0, int(n)) for n in r[1]),
            running=sum(int(n) for n in h),
            awaiting_human=int(r[2]),
        )
        for p, r, h in zip(parts.parts, replies, held, strict=True)
    ]
    workers = [
        PoolWorker(
            lease_id=w,
            runs=sum(int(r[i]) for r in held),
            lease_age_ms=max(0, now_ms - (int(expiry[w]) - lease_ms)),  # expiry = last renewal + lease
            expires_in_ms=max(0, int(expiry[w]) - now_ms),
        )
        for i, w in enumerate(ids)
    ]
    return PoolAnswer(
        now=now_ms,
        lease_ms=lease_ms,
        workers=workers,
        partitions=partitions,
        minutes=per_minute,
        last_hour={f: sum(getattr(m, f) for m in per_minute) for f in FIELDS},
    )
