"""agentmill's benchmark: ``bin/dev bench`` (or ``python -m bench``), options with ``--help``.

Starts its own redis-server on a free port and measures every figure next to a baseline taken in
the same run, so the ratios hold on a shared, noisy machine. Prints a table of medians with
min–max over the repetitions and writes JSON (bench/results/latest.json by default).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from redis.asyncio import Redis

from bench.attack_kinds import ATTACKS
from bench.figure import Figure, fmt
from bench.figures_caching import CachingFigures
from bench.figures_cluster import ClusterFigures
from bench.figures_concurrency import ConcurrencyFigures, machine_cores
from bench.figures_economy import EconomyFigures
from bench.figures_functions import FunctionsFigures
from bench.figures_io import IoFigures
from bench.figures_isolation import IsolationFigures
from bench.figures_lanes import LanesFigures
from bench.figures_peers import DURABILITY, PEERS, PeerFigures
from bench.figures_results import ResultsFigures
from bench.figures_runs import RunFigures
from bench.figures_streaming import StreamingFigures
from bench.machine import describe, load_average
from bench.plumbing import ROOT


class Bench(
    RunFigures,
    ConcurrencyFigures,
    IoFigures,
    IsolationFigures,
    ResultsFigures,
    ClusterFigures,
    LanesFigures,
    PeerFigures,
    FunctionsFigures,
    StreamingFigures,
    CachingFigures,
    EconomyFigures,
):
    """Every figure, run in order; a table and JSON at the end."""

    machine: dict[str, Any]

    # ---- report ----

    def table(self) -> str:
        lines = [
            f"agentmill bench — {platform.node()} ({os.cpu_count()} cores), redis-server on {self.server.url}",
            "",
        ]
        head = f"{'figure':<62} {'agentmill':>24} {'baseline':>24} {'ratio':>7}  target"
        lines += [head, "-" * len(head)]
        for f in self.figures:
            ratio = f.ratio()
            lines.append(
                f"{f.name:<62} {fmt(f.ours):>24} {fmt(f.base):>24} {f'{ratio:.2f}' if ratio else '–':>7}  {f.target}"
            )
            if f.base_name or f.note:
                lines.append(f"{'':<4}{('baseline: ' + f.base_name + '; ') if f.base_name else ''}{f.note}")
        if self.peers_table:
            lines.append(self.peers_table)
        return "\n".join(lines)

    async def run(self) -> None:
        a = self.args
        self.server.start()
        r = Redis.from_url(self.server.url)
        self.machine = {}
        try:
            self.machine = await describe(r)
            rtt, cmds = 1, 1
            if "cost" in a.only or "steps" in a.only:
                rtt, cmds = await self.fig_cost(r)
            figures: list[tuple[str, Callable[[], Awaitable[None]]]] = [
                ("throughput", lambda: self.fig_throughput(r)),
                ("functions", lambda: self.fig_functions(r)),
                ("steps", lambda: self.fig_steps(r, rtt, cmds)),
                ("concurrency", lambda: self.fig_concurrency(r)),
                ("streaming", lambda: self.fig_streaming(r)),
                ("heartbeat", lambda: self.fig_heartbeat(r)),
                ("latency", lambda: self.fig_latency(r)),
                ("batch", lambda: self.fig_batch(r)),
                ("ledger", lambda: self.fig_ledger(r)),
                ("cluster", lambda: self.fig_cluster(r)),
                ("isolation", lambda: self.fig_isolation(r)),
                ("results", lambda: self.fig_results(r)),
                ("lanes", lambda: self.fig_lanes(r)),
                ("peers", lambda: self.fig_peers(r)),
                ("caching", lambda: self.fig_caching(r)),
                ("economy", lambda: self.fig_economy(r)),
            ]
            for name, measure in figures:
                if name not in a.only:
                    continue
                try:
                    await measure()
                except Exception as exc:  # one broken figure must not cost the others
                    self.figures.append(
                        Figure(f"{name}: not measured", "", note=f"{type(exc).__name__}: {exc}")
                    )
                    for p in self.procs:
                        self.stop(p)
        finally:
            self.machine["load_end"] = load_average()
            for p in self.procs:
                self.stop(p)
            await r.aclose()
            self.server.close()


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--runs", type=int, default=1000, help="one-step runs per repetition (figure 1)")
    ap.add_argument("--step-runs", type=int, default=100, help="ten-step runs per repetition (figure 2)")
    ap.add_argument("--cost-runs", type=int, default=100)
    ap.add_argument(
        "--inflight", type=int, nargs="+", default=[100, 1000, 2000], help="figure 4: one worker process"
    )
    ap.add_argument("--beat-inflight", type=int, nargs="+", default=[100, 1000, 2000], help="figure 4b")
    ap.add_argument("--beat-seconds", type=float, default=3.0, help="figure 4b: how long to count")
    ap.add_argument("--latency-samples", type=int, default=100)
    ap.add_argument("--isolation-samples", type=int, default=100, help="figure 9: the other tenant's runs")
    ap.add_argument(
        "--isolation-index", type=int, default=5000, help="figure 9: runs in the attacker's index"
    )
    ap.add_argument(
        "--isolation-attacks",
        nargs="*",
        default=list(ATTACKS),
        choices=ATTACKS,
        help="figure 9b-: the attacks of bench/attack_kinds.py to measure, one after another",
    )
    ap.add_argument(
        "--isolation-attack-s", type=float, default=15.0, help="figure 9b-: each attack's seconds"
    )
    ap.add_argument("--poll-delay", type=float, default=0.05)
    ap.add_argument(
        "--machine-processes",
        type=int,
        default=machine_cores(),
        help="figure 4m: `agentmill worker --processes N` beside N bare arq processes (default: one a "
        "core; 1: no 4m rows)",
    )
    ap.add_argument(
        "--machine-cold",
        action="store_true",
        help="figure 4m: start the processes on the filled queue (their start-up in the span), not before",
    )
    ap.add_argument(
        "--machine-inflight", type=int, nargs="+", default=[1000, 2000], help="figure 4m: runs in flight"
    )
    ap.add_argument("--cluster-runs", type=int, default=300, help="ten-step runs per cluster load (figure 8)")
    ap.add_argument("--functions-runs", type=int, default=200, help="ten-step runs per load of figure 3b")
    ap.add_argument("--functions-workers", type=int, default=2, help="worker processes of figure 3b")
    ap.add_argument("--cluster-workers", type=int, default=2, help="worker processes of figure 8")
    ap.add_argument("--results-runs", type=int, default=100_000, help="runs of the batch figure 10 exports")
    ap.add_argument(
        "--profile",
        type=Path,
        help="figure 4: py-spy samples each worker into PROFILE-<in-flight>.json (speedscope)",
    )
    ap.add_argument(
        "--stalls",
        type=Path,
        help="figure 4: each worker notes its event loop's long turns and what ran in them into "
        "STALLS-<in-flight>.json (python -m bench.stall_watch FILE prints them)",
    )
    ap.add_argument(
        "--only",
        nargs="+",
        default=[
            "cost",
            "functions",
            "throughput",
            "steps",
            "concurrency",
            "streaming",
            "heartbeat",
            "latency",
            "batch",
            "ledger",
            "cluster",
            "isolation",
            "results",
            "lanes",
            "peers",
            "caching",
            "economy",
        ],
    )
    ap.add_argument(
        "--streaming-inflight", type=int, nargs="+", default=[500], help="figure 4s: runs streaming at once"
    )
    ap.add_argument("--lanes-batch", type=int, default=20_000, help="figure 11a: the priority-2 batch")
    ap.add_argument("--lanes-interactive", type=int, default=200, help="figure 11a: priority-8 runs")
    ap.add_argument("--lanes-run-ms", type=int, default=500, help="figure 11: each run's model reply")
    ap.add_argument("--lanes-aging-ms", type=int, default=500, help="figure 11b: AGENTMILL_PRIORITY_AGING_MS")
    ap.add_argument("--lanes-stream-rate", type=int, default=150, help="figure 11b: priority-8 runs/s")
    ap.add_argument("--lanes-stream-s", type=float, default=12.0, help="figure 11b: the stream's length")
    ap.add_argument("--peers", nargs="+", choices=PEERS, default=list(PEERS), help="figure 12: which systems")
    ap.add_argument(
        "--peer-durability",
        nargs="+",
        choices=list(DURABILITY),
        default=list(DURABILITY),
        help="figure 12: Redis appendfsync levels, each against PostgreSQL's synchronous_commit "
        + ", ".join(f"{k}→{v}" for k, v in DURABILITY.items()),
    )
    ap.add_argument("--peer-runs", type=int, default=1000, help="figure 12: jobs per throughput repetition")
    ap.add_argument("--peer-concurrency", type=int, default=100, help="figure 12: concurrent jobs per worker")
    ap.add_argument("--peer-latency-runs", type=int, default=300, help="figure 12: paced jobs for latency")
    ap.add_argument("--peer-rate", type=float, default=100.0, help="figure 12: paced submissions per second")
    ap.add_argument("--economy-runs", type=int, default=200, help="figure 14: runs per lane")
    ap.add_argument(
        "--economy-delay", type=float, default=1.0, help="figure 14: the batch server's delay (s) per batch"
    )
    ap.add_argument("--json", type=Path, default=ROOT / "bench" / "results" / "latest.json")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    # A SIGTERM (timeout, Ctrl-C's cousin) unwinds like an exception, so the finally blocks stop the
    # processes and the PostgreSQL cluster (a daemon that would outlive the bench) it started.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    b = Bench(args)
    t0 = time.monotonic()
    asyncio.run(b.run())
    print(b.table())
    print(f"\n(elapsed {time.monotonic() - t0:.0f} s)")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(
        json.dumps(
            {
                "machine": b.machine,
                "figures": [f.row() for f in b.figures],
                "args": {k: v for k, v in vars(args).items() if k != "json"},
            },
            indent=2,
            default=str,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
