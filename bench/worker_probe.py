"""``python -m bench.worker_probe``: a worker process (as ``python -m worker``) that also samples its
event-loop lag and RSS for the bench, written to ``$AGENTMILL_BENCH_STATS`` when it stops."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time

from shared import logs, loop
from shared.settings import get_settings
from worker.jobs import WorkerProcess


async def lag_probe(path: str) -> None:
    """For the bench: event-loop lag samples (how late a 20 ms sleep wakes), written on cancel."""

    def rss() -> int:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        return 0

    start = rss()
    lags: list[float] = []
    try:
        while True:
            t = time.perf_counter()
            await asyncio.sleep(0.02)
            lags.append((time.perf_counter() - t - 0.02) * 1000)
            del lags[:-20_000]
    finally:
        s = sorted(lags) or [0.0]
        with open(path, "w") as f:
            json.dump(
                {
                    "rss_start": start,
                    "lag_p50_ms": s[len(s) // 2],
                    "lag_p99_ms": s[int(len(s) * 0.99)],
                    "lag_max_ms": s[-1],
                },
                f,
            )


async def main() -> None:
    settings = get_settings()
    proc = WorkerProcess(settings)
    logs.configure(json_lines=settings.log_json, level=settings.log_level, workerId=proc.worker_id)
    probe = asyncio.create_task(lag_probe(os.environ["AGENTMILL_BENCH_STATS"]))
    try:
        await proc.run()
    finally:
        probe.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await probe


if __name__ == "__main__":
    loop.run(main())
