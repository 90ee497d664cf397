"""CPU per run with encryption at rest (AGENTMILL_DATA_KEYS) beside the same runs without it: figure
1's one-step runs and a ten-step run (nine echo tool calls with a paragraph of arguments each, then
an answer), the worker's and redis-server's CPU per run (bench/cpu_per_run.py's ``one``: a fresh
worker process each time, counted from after its start-up). The runs are submitted from this process,
which seals their inputs as the API would. The configurations alternate (off, on, off, on …) so a
drift in the machine's load falls on both; the figure is the median of each.

    bin/dev python bench/encryption.py OUT.json [--runs 500] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import statistics
import sys
from typing import Any

sys.path.insert(0, os.getcwd())

from redis.asyncio import Redis

from bench.__main__ import Bench
from bench.cpu_per_run import one
from shared import payload_crypto

WORDS = "the quick brown fox jumps over the lazy dog while the bench counts every cycle it spends; " * 3
TEN_STEPS: list[dict[str, Any]] = [
    *({"toolCalls": [{"name": "echo", "arguments": {"text": f"{i} {WORDS}"}}]} for i in range(9)),
    {"text": f"done: {WORDS}"},
]
SHAPES = {"fig1": [{"text": "hi"}], "ten_steps": TEN_STEPS}


async def completed(r: Redis) -> int:
    """Runs that ended completed (not failed: the figure is of runs that did their ten steps)."""
    n = 0
    async for k in r.scan_iter(match="am:*:run:*", count=1000):
        if await r.type(k) == b"hash" and await r.hget(k, "status") == b"completed":  # type: ignore[misc]
            n += 1
    return n


async def measure(out: str, runs: int, rounds: int) -> None:
    keys = f"k1:{base64.b64encode(os.urandom(32)).decode()}"
    b = Bench(argparse.Namespace(poll_delay=0.05))
    b.server.start()
    r = Redis.from_url(b.server.url)
    got: dict[str, dict[str, list[dict[str, float]]]] = {s: {"off": [], "on": []} for s in SHAPES}
    try:
        for _ in range(rounds):
            for shape, script in SHAPES.items():
                for mode in ("off", "on"):
                    payload_crypto.install(keys if mode == "on" else None)  # this process seals the inputs
                    env = {"AGENTMILL_DATA_KEYS": keys} if mode == "on" else {}
                    fig = await one(b, r, runs, script, env, False, False)
                    fig["completed"] = await completed(r)
                    assert fig["completed"] == runs, (
                        f"{shape} {mode}: {fig['completed']} of {runs} runs completed"
                    )
                    got[shape][mode].append(fig)
    finally:
        for p in b.procs:
            b.stop(p)
        await r.aclose()
        b.server.close()
    res: dict[str, Any] = {}
    for shape, modes in got.items():
        res[shape] = {
            mode: {k: round(statistics.median(x[k] for x in xs), 3)
                   for k in ("worker_ms_per_run", "redis_ms_per_run", "runs_s", "load", "completed")}
            for mode, xs in modes.items()
        }  # fmt: skip
        off, on = res[shape]["off"]["worker_ms_per_run"], res[shape]["on"]["worker_ms_per_run"]
        res[shape]["worker_cpu_ratio"] = round(on / off, 3) if off else None
    with open(out, "w") as f:
        json.dump(res, f, indent=1)
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--runs", type=int, default=500, help="runs of each shape a measurement")
    ap.add_argument("--rounds", type=int, default=3, help="off/on pairs of each shape")
    a = ap.parse_args()
    asyncio.run(measure(a.out, a.runs, a.rounds))
