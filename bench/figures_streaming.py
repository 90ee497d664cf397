"""Figure 4s: runs whose model streams. One worker with N runs in flight, each a reply of 100 words
streamed over 2 s, with the deltas' pace (worker/core/delta_pace.py, the default) beside the same load
flushing every run every AGENTMILL_DELTA_FLUSH_MS whatever the number of streams (the pace off), in
one run, alternated: Redis and worker CPU a run, and runs/s."""

from __future__ import annotations

import asyncio
import time

from redis.asyncio import Redis

from bench.figure import Figure
from bench.plumbing import Plumbing
from bench.probes import process_cpu_s, redis_cpu_s

REPLY = [{"text": "word " * 100, "delayMs": 2000}]
UNPACED = str(10**9)  # AGENTMILL_DELTA_FLUSH_PER_S so high that every run flushes every 50 ms


class StreamingFigures(Plumbing):
    async def fig_streaming(self, r: Redis) -> None:
        for n in self.args.streaming_inflight:
            figs = {
                key: Figure(
                    f"4s. {n} runs streaming a 2 s reply, one worker: {what}",
                    unit,
                    base_name="the same with every run flushing every 50 ms (AGENTMILL_DELTA_FLUSH_PER_S "
                    "unbounded)",
                    higher_is_better=key == "runs_s",
                )
                for key, what, unit in (
                    ("redis_ms", "Redis CPU a run", "ms"),
                    ("worker_ms", "worker CPU a run", "ms"),
                    ("runs_s", "runs/s", "runs/s"),
                )
            }
            for _ in range(self.args.reps):
                for paced in (True, False):
                    got = await self._streamed(r, n, paced)
                    for key, f in figs.items():
                        (f.ours if paced else f.base).append(got[key])
            figs["runs_s"].note = f"ideal {n / 2:.0f} runs/s (every reply takes 2 s)"
            self.figures += figs.values()

    async def _streamed(self, r: Redis, n: int, paced: bool) -> dict[str, float]:
        await self.flush(r)
        env = {"AGENTMILL_MAX_JOBS": str(n + 10)}
        if not paced:
            env["AGENTMILL_DELTA_FLUSH_PER_S"] = UNPACED
        p = self.spawn(["-m", "app.worker"], **env)
        try:
            await self.wait_started(r)
            await asyncio.sleep(1.0)  # imports and first polls over
            c0, rc0, t0 = process_cpu_s(p.pid), await redis_cpu_s(r), time.perf_counter()
            await self.producer(r).submit_many([self.script_run(REPLY)] * n)
            while not await self.runs_done(r):
                await asyncio.sleep(0.02)
            t1 = time.perf_counter()
            c1, rc1 = process_cpu_s(p.pid), await redis_cpu_s(r)
        finally:
            self.stop(p)
        return {
            "redis_ms": (rc1 - rc0) * 1000 / n,
            "worker_ms": (c1 - c0) * 1000 / n,
            "runs_s": n / (t1 - t0),
        }
