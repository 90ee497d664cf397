"""What held a worker's event loop: ``bench --stalls PREFIX`` (figure 4) runs this in each worker.

A ticker on the loop wakes every 5 ms; a thread beside it samples the main thread's Python stack
every 4 ms while the ticker is more than 30 ms late (a turn that long), and ``gc.callbacks`` times
each collection. When the worker stops it writes ``{late: [[t_s, ms]], gc: [[t_s, generation, ms]],
stacks: [[t_s, stack]]}`` (times from the watch's start), and ``python -m bench.stall_watch FILE``
prints each late turn with the collections and the stacks inside it. A stall that shows no stack
held the GIL in C (a collection, a long C call). Found with it: runs claimed together starting in
one turn, middle-generation collections, a lazy import at shutdown (bench/HISTORY.md)."""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import threading
import time
from pathlib import Path
from typing import Any

from bench.stack_sampler import sample_main_stack

__all__ = ["StallWatch"]

TICK_S = 0.005
LATE_S = 0.015  # ticks this late are kept
STALL_S = 0.030  # while the ticker is this late, the thread samples the loop's stack
SAMPLE_S = 0.004
_SKIP = ("events.py", "base_events.py", "runners.py", "tasks.py", "futures.py", "<frozen", "stall_watch.py")


class StallWatch:
    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self.beat = self.t0
        self.late: list[tuple[float, float]] = []
        self.collections: list[tuple[float, int, float]] = []
        self.stacks: list[tuple[float, str]] = []
        self._gc_start = 0.0
        self._stop = threading.Event()

    def start(self) -> asyncio.Task[None]:
        gc.callbacks.append(self._on_gc)
        sample_main_stack(
            SAMPLE_S, self._stalled, self._keep, self._stop, skip=_SKIP, depth=8, name="stall-watch"
        )
        return asyncio.create_task(self._tick())

    async def _tick(self) -> None:
        while True:
            t = self.beat = time.monotonic()
            await asyncio.sleep(TICK_S)
            late = time.monotonic() - t - TICK_S
            if late > LATE_S:
                self.late.append((round(t - self.t0, 3), round(late * 1000, 1)))

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._gc_start = time.monotonic()
        else:
            ms = (time.monotonic() - self._gc_start) * 1000
            if ms > 2:
                self.collections.append(
                    (round(self._gc_start - self.t0, 3), info["generation"], round(ms, 1))
                )

    def _stalled(self) -> bool:
        return time.monotonic() - self.beat >= STALL_S

    def _keep(self, stack: str) -> None:
        self.stacks.append((round(time.monotonic() - self.t0, 3), stack))

    def dump(self, path: str) -> None:
        self._stop.set()
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)
        Path(path).write_text(json.dumps({"late": self.late, "gc": self.collections, "stacks": self.stacks}))


def report(data: dict[str, Any], over_ms: float) -> str:
    lines = []
    for t, ms in data["late"]:
        if ms < over_ms:
            continue
        end = t + (ms + TICK_S * 1000) / 1000
        lines.append(f"{t:8.3f} s  a turn {ms:.0f} ms late")
        lines += [f"           collection gen {g}: {d} ms" for s, g, d in data["gc"] if t <= s <= end]
        seen: dict[str, int] = {}
        for s, stack in data["stacks"]:
            if t <= s <= end:
                seen[stack] = seen.get(stack, 0) + 1
        lines += [
            f"           {n} x {stack[:200]}" for stack, n in sorted(seen.items(), key=lambda kv: -kv[1])
        ]
    return "\n".join(lines) or f"no turn {over_ms:g} ms late"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("file", type=Path)
    ap.add_argument("--over-ms", type=float, default=30.0, help="show the turns at least this late")
    a = ap.parse_args()
    print(report(json.loads(a.file.read_text()), a.over_ms))


if __name__ == "__main__":
    main()
