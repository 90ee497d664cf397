"""CPU per run with traces off and on: ``bin/dev python -m bench.trace_cost [--runs N] [--reps R]``.

Drives runs (a tool call, then an answer: an attempt, two model calls and a tool call) through the
real RunDriver on in-memory ports (no Redis, no sockets: tests/unit/test_runner.py's World) and
measures the process CPU time per run, alternating traces off and on (the SDK with a batch
processor into an in-memory exporter) in one process. CPU time, not wall time, so a busy shared
machine blurs it less; bench/HISTORY.md has the figures and the same measure beside main's tree.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

from tests.unit.test_runner import World
from worker.telemetry import tracing

SCRIPT: list[dict[str, Any]] = [
    {"toolCalls": [{"name": "echo", "arguments": {"text": "x"}}]},
    {"text": "done"},
]


async def cpu_per_run_us(n: int) -> float:
    worlds = [World(SCRIPT, run_id=f"run-{i}") for i in range(n)]
    drivers = [w.driver()[0] for w in worlds]
    t0 = time.process_time()
    await asyncio.gather(*(d.run() for d in drivers))
    dt = time.process_time() - t0
    assert all(w.run.status == "completed" for w in worlds)
    return dt / n * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.trace_cost", description=__doc__)
    ap.add_argument("--runs", type=int, default=2000)
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(InMemorySpanExporter()))
    off: list[float] = []
    on: list[float] = []
    for _ in range(a.reps):
        tracing.install(None)
        off.append(asyncio.run(cpu_per_run_us(a.runs)))
        tracing.install(provider)
        on.append(asyncio.run(cpu_per_run_us(a.runs)))
    tracing.install(None)
    provider.shutdown()
    for name, xs in (("off", off), ("on", on)):
        print(f"traces {name:>3}: {statistics.median(xs):7.0f} µs CPU a run ({min(xs):.0f}–{max(xs):.0f})")
    print(f"on / off: {statistics.median(on) / statistics.median(off):.2f}")


if __name__ == "__main__":
    main()
