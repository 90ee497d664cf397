"""CPU per run of one worker process and of redis-server, under figure 1's load (one-step runs) and
figure 4's (1,000 runs in flight, the model answering after 1 s), for comparing two checkouts side
by side on a shared machine: CPU time holds up far better than runs/s when other processes take
the cores (it still drifts by 10-15 % with the load, so alternate the trees and compare pairs).

It measures the tree it is run from (its ``bench`` package, from the working directory, with that
tree's venv), so one copy of this file serves any checkout whose bench has ``Bench`` with
``spawn``, ``wait_started``, ``producer``, ``script_run`` and ``runs_done`` (baf578c's does):

    cd /work/wt-OTHER && .venv/bin/python /path/to/bench/cpu_per_run.py OUT.json

prints and writes {"fig1"|"fig4": {worker_ms_per_run, redis_ms_per_run, runs_s, load}}. The
worker's CPU is read from /proc after its start-up (Linux only).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from typing import Any

sys.path.insert(0, os.getcwd())  # the tree measured is the one it runs in

from redis.asyncio import Redis

from bench.__main__ import Bench

TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a live process."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


async def redis_cpu_s(r: Redis) -> float:
    i = await r.info("cpu")
    return float(i["used_cpu_user"]) + float(i["used_cpu_sys"])


async def one(b: Any, r: Redis, n: int, script: list[dict[str, Any]]) -> dict[str, float]:
    """n runs of ``script`` through one fresh worker process, counted from after its start-up."""
    await b.flush(r)
    p = b.spawn(["-m", "worker"])
    await b.wait_started(r)
    await asyncio.sleep(1.5)  # imports and first polls over
    c0, rc0, t0 = cpu_s(p.pid), await redis_cpu_s(r), time.perf_counter()
    await b.producer(r).submit_many([b.script_run(script)] * n)
    while not await b.runs_done(r):
        await asyncio.sleep(0.01)
    c1, rc1, t1 = cpu_s(p.pid), await redis_cpu_s(r), time.perf_counter()
    b.stop(p)
    return {
        "worker_ms_per_run": (c1 - c0) * 1000 / n,
        "redis_ms_per_run": (rc1 - rc0) * 1000 / n,
        "runs_s": n / (t1 - t0),
        "load": os.getloadavg()[0],
    }


async def measure(out: str, runs: int, inflight: int) -> None:
    b = Bench(argparse.Namespace(poll_delay=0.05))
    b.server.start()
    r = Redis.from_url(b.server.url)
    try:
        res = {
            "fig1": await one(b, r, runs, [{"text": "hi"}]),
            "fig4": await one(b, r, inflight, [{"text": "ok", "delayMs": 1000}]),
        }
    finally:
        for p in b.procs:
            b.stop(p)
        await r.aclose()
        b.server.close()
    with open(out, "w") as f:
        json.dump(res, f)
    print(res)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--runs", type=int, default=2000, help="figure 1's one-step runs")
    ap.add_argument("--inflight", type=int, default=1000, help="figure 4's runs in flight")
    a = ap.parse_args()
    asyncio.run(measure(a.out, a.runs, a.inflight))
