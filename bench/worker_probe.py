"""``python -m bench.worker_probe``: a worker process (as ``python -m app.worker``) that also samples its
event-loop lag and RSS for the bench, written to ``$AGENTMILL_BENCH_STATS`` when it stops."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable

from bench.stall_watch import StallWatch
from shared import logs, loop
from shared.settings import get_settings
from worker.process.jobs import WorkerProcess


class GcClock:
    """Time the collector takes, by generation (gc.callbacks), for the bench's notes."""

    def __init__(self) -> None:
        self.spent = [0.0, 0.0, 0.0]
        self.count = [0, 0, 0]
        self._t = 0.0
        gc.callbacks.append(self._cb)

    def _cb(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._t = time.perf_counter()
        else:
            g = info["generation"]
            self.spent[g] += time.perf_counter() - self._t
            self.count[g] += 1


async def lag_probe(path: str, started: Callable[[], bool]) -> None:
    """For the bench: event-loop lag samples (how late a 20 ms sleep wakes), written on cancel;
    taken once ``started()``: the worker's start-up (connecting, its first lease, imports and
    clients made on the loop) holds no run, and its few long turns were most of a short figure's
    p99 (figure 4 at 100 runs: about 250 samples)."""

    def rss() -> int:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        return 0

    start = rss()
    gcc = GcClock()
    lags: list[float] = []
    try:
        while True:
            t = time.perf_counter()
            await asyncio.sleep(0.02)
            if started():
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
                    "gc_ms": [round(x * 1000, 1) for x in gcc.spent],
                    "gc_count": gcc.count,
                },
                f,
            )


def profiler(out: str) -> subprocess.Popen[bytes] | None:
    """With ``$AGENTMILL_BENCH_PROFILE`` set (bench ``--profile``), py-spy samples this process into that
    file (speedscope JSON, 1,000 samples a second, idle ones kept so that the samples are a timeline)
    until the worker stops."""
    if not out:
        return None
    spy = shutil.which("py-spy")
    if spy is None:
        raise SystemExit("--profile needs py-spy on PATH (pip install py-spy)")
    cmd = [
        spy,
        "record",
        "--pid",
        str(os.getpid()),
        "--rate",
        "1000",
        "--idle",
        "--format",
        "speedscope",
        "-o",
        out,
    ]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


async def main() -> None:
    settings = get_settings()
    proc = WorkerProcess(settings)
    logs.configure(json_lines=settings.log_json, level=settings.log_level, workerId=proc.worker_id)
    probe = asyncio.create_task(
        lag_probe(os.environ["AGENTMILL_BENCH_STATS"], lambda: getattr(proc, "main", None) is not None)
    )  # from the arq worker's start (WorkerProcess._work), when it begins to take jobs
    spy = profiler(os.environ.get("AGENTMILL_BENCH_PROFILE", ""))
    stalls_path = os.environ.get("AGENTMILL_BENCH_STALLS", "")
    watch = StallWatch() if stalls_path else None
    ticker = watch.start() if watch is not None else None
    try:
        await proc.run()
    finally:
        if watch is not None and ticker is not None:
            ticker.cancel()
            watch.dump(stalls_path)
        if spy is not None:
            spy.send_signal(signal.SIGINT)
            await asyncio.to_thread(spy.wait, 30)
        probe.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await probe


if __name__ == "__main__":
    loop.run(main())
