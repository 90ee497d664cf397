"""Redis time a claimed job: claim_jobs with its runs' acquisition (acquire_run, the opening event),
as a worker's poll makes it, timed by Redis itself (SLOWLOG, every command logged), exact where the
worker's wait for a claim is not. Figure 4's worker claims 1,000 due jobs in claims of up to 256;
on two cores Redis spends this time on the same cores as the worker processes.

    .venv/bin/python bench/claim_cost.py [--runs 1000] [--claim 256 64] [--reps 3]

prints, a claim size a line, the microseconds a job (median of ``--reps``), those of its commands
(the rest is Lua's) and how many commands, and each claim's. The times are wall time inside the
calls: a Redis that shares busy cores counts the time it was not scheduled too; compare trees side
by side. The command counts are exact.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
from typing import Any

sys.path.insert(0, os.getcwd())  # the tree measured is the one it runs in

from redis.asyncio import Redis

from bench.__main__ import Bench
from shared.scripts import Scripts
from shared.settings import Settings
from tests.support.schema import K, parts_of
from worker.adapters.worker_beat import beat

LEASE_ID = "claim-cost"
OUTSIDE = {"fcall", "evalsha", "time", "config|set", "config|resetstat", "slowlog|reset"}  # not a claim's


async def one(b: Any, r: Redis, runs: int, size: int) -> tuple[float, float, list[int], float]:
    """``runs`` one-step runs queued, then claimed ``size`` at a time under a live lease: Redis's
    microseconds a claimed job, of them in the commands the claims ran (INFO commandstats; the rest
    is Lua), each claim's, and the commands the claims ran a job."""
    await b.flush(r)
    await b.producer(r).submit_many([b.script_run([{"text": "ok"}])] * runs)
    s = Settings(redis_url=b.server.url)
    scripts = Scripts.for_settings(r, s)
    await beat(parts_of(r), scripts, LEASE_ID, 120_000, register=True)
    await r.config_set("slowlog-log-slower-than", 0)
    await r.config_set("slowlog-max-len", 100_000)
    await r.slowlog_reset()
    await r.config_resetstat()
    got = 0
    while got < runs:
        t = await r.time()
        now_ms = int(t[0]) * 1000 + int(t[1]) // 1000
        args = [now_ms, 86_400_000, size, K.in_progress_key(""), s.lease_ms, 0, "", LEASE_ID]
        reply = await scripts.claim_jobs(*scripts.frame(K, [], args))
        if not reply:
            break
        got += len(reply) // 3
    stats = await r.info("commandstats")
    await r.config_set("slowlog-log-slower-than", 10_000)
    claims = [
        int(e["duration"])
        for e in reversed(await r.slowlog_get(100_000))
        if bytes(e["command"]).startswith((b"FCALL", b"EVALSHA"))  # the claims: nothing else runs a script
    ]
    inside = [v for k, v in stats.items() if k.removeprefix("cmdstat_") not in OUTSIDE]
    usec, calls = sum(v["usec"] for v in inside), sum(v["calls"] for v in inside)
    return sum(claims) / max(1, got), usec / max(1, got), claims, calls / max(1, got)


async def main(runs: int, sizes: list[int], reps: int) -> None:
    b = Bench(argparse.Namespace(poll_delay=0.05))
    b.server.start()
    r = Redis.from_url(b.server.url)
    try:
        for size in sizes:
            got = [await one(b, r, runs, size) for _ in range(reps)]
            per_job = statistics.median(g[0] for g in got)
            print(f"claims of {size}: {per_job:.1f} µs a job ({', '.join(f'{g[0]:.1f}' for g in got)}), "
                  f"{statistics.median(g[1] for g in got):.1f} µs of it in its commands "
                  f"({statistics.median(g[3] for g in got):.2f} commands); "
                  f"last rep's claims, µs: {got[-1][2]}")  # fmt: skip
    finally:
        await r.aclose()
        b.server.close()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--claim", type=int, nargs="+", default=[256, 64])
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    asyncio.run(main(a.runs, a.claim, a.reps))
