"""Figure 4: runs in flight whose model answers after 1 s, on one worker process (4.) and on the
machine's cores (4m., ``agentmill worker --processes k``), each beside bare arq jobs that sleep 1 s on
as many arq processes, the jobs split between them as the runs are.

The span is from the first run's start to the last run's end. The one-process rows fill the queue
before the process starts. The 4m rows start the processes first, as on a pool that runs before a
burst comes, and fill the queue while they are paused (SIGSTOP, then SIGCONT together): filled
before they start, a process whose start-up (imports) ended later than its sibling's would count
its start-up in the span (``--machine-cold``: so, for both agentmill and arq)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import statistics
import subprocess
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

from redis.asyncio import Redis

from bench.bare_arq import ARQ_UP
from bench.figure import Figure
from bench.plumbing import Plumbing
from bench.probes import children, process_cpu_s, read_json, tree_cpu_s, tree_kib
from tests.support.schema import K

ONE_TARGET = "1,000 in flight ≥ 0.8 of ideal, ≥ 1.3 × bare arq"
IDLE_S = 0.5  # after the last process came up: its first polls, then its wait
MACHINE_TARGET = "1,000 in flight ≥ 0.85 of ideal, ≥ 1.5 × bare arq on as many processes"


def machine_cores() -> int:
    """The cores this process may run on (figure 4m's processes: one a core)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def slots(n: int, k: int) -> int:
    """Each of ``k`` processes' max_jobs for ``n`` runs: its share, and a margin (one process: all)."""
    return -(-n // k) + 10


@contextlib.contextmanager
def paused(pids: list[int]) -> Iterator[None]:
    """The processes stopped (SIGSTOP) meanwhile, then continued together: a queue filled while they
    wait is all there when they look (a submission that takes longer than arq's raw enqueue, under
    load, would otherwise start its first runs while the last ones are still being validated)."""
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)


class ProcessWatch:
    """The runs each agentmill worker process holds (its runs set), sampled while a queue drains:
    when each first held one, and how many it held at most."""

    def __init__(self) -> None:
        self.first: dict[bytes, float] = {}
        self.peak: dict[bytes, int] = {}

    async def sample(self, r: Redis) -> None:
        ids = await r.zrange(K.workers, 0, -1)
        if not ids:
            return
        async with r.pipeline(transaction=False) as pipe:
            for i in ids:
                pipe.scard(K.worker_runs(i.decode()))
            held = await pipe.execute()
        now = time.monotonic()
        for i, h in zip(ids, held, strict=True):
            if h:
                self.first.setdefault(i, now)
                self.peak[i] = max(self.peak.get(i, 0), int(h))

    def gap_ms(self) -> float:
        """Between the first process's first run and the last process's (to the 20 ms sampled)."""
        return (max(self.first.values()) - min(self.first.values())) * 1000 if self.first else 0.0

    def peaks(self, k: int) -> str:
        """Each process's most runs at once, most first (0: a process that held none)."""
        held = sorted(self.peak.values(), reverse=True)
        return "/".join(str(v) for v in held + [0] * (k - len(held)))


class ConcurrencyFigures(Plumbing):
    async def fig_concurrency(self, r: Redis) -> None:
        a = self.args
        rows = [(n, 1) for n in a.inflight]
        if a.machine_processes > 1:  # one core: the one-process rows are the machine's
            rows += [(n, a.machine_processes) for n in a.machine_inflight]
        for n, k in rows:
            await self.concurrency_row(r, n, k)

    def warm(self, k: int) -> bool:
        """Whether the processes start, and wait idle, before the runs are submitted (4m by default)."""
        return k > 1 and not self.args.machine_cold

    async def concurrency_row(self, r: Redis, n: int, k: int) -> None:
        a = self.args
        profiled = " (profiled)" if a.profile and k == 1 else ""
        started = ", started before the clock" if self.warm(k) else ""
        f = Figure(
            # py-spy samples on the same cores: such a figure is not comparable with the others.
            f"4. {n} runs in flight, model latency 1 s{profiled}"
            if k == 1
            else f"4m. {n} runs in flight, model latency 1 s, {k} worker processes{started}",
            "runs/s",
            base_name="ideal (in-flight ÷ latency)",
            target=ONE_TARGET if k == 1 else MACHINE_TARGET,
        )
        bare: list[float] = []
        watch = ProcessWatch()
        lag: dict[str, list[float]] = {}
        for _ in range(a.reps):
            watch = ProcessWatch()
            t, got = await self.agentmill_drain(r, n, k, watch)
            f.ours.append(n / t)
            f.base.append(float(n))
            for key, value in got.items():
                lag.setdefault(key, []).append(float(value))
            t, cpu = await self.bare_arq_drain(r, n, k)
            bare.append(n / t)
            lag.setdefault("arq_cpu_ms", []).append(cpu)
        med = {key: statistics.median(v) for key, v in lag.items()}
        x_bare = statistics.median(f.ours) / statistics.median(bare)
        f.extra = {
            "in_flight": float(n),
            "processes": float(k),
            "worker_kb_per_run": med["kb_per_run"],
            "loop_lag_p99_ms": med["lag_p99_ms"],
            "bare_arq_of_ideal": statistics.median(bare) / n,
            "x_bare_arq": x_bare,
            "first_runs_apart_ms": med["gap_ms"],
            "worker_cpu_ms_per_run": med["cpu_ms"],
            "supervisor_cpu_ms_per_run": med["supervisor_cpu_ms"],
            "bare_arq_cpu_ms_per_job": med["arq_cpu_ms"],
        }
        bare_text = ", ".join(f"{b:.0f}" for b in bare)
        f.note = (
            f"{x_bare:.2f} × bare arq jobs sleeping 1 s on {k} arq process{'es' if k > 1 else ''}"
            f"{' (started before the clock too)' if self.warm(k) else ''} "
            f"({bare_text} runs/s, {statistics.median(bare) / n:.2f} of ideal); "
            f"runs started over {med['spread_ms']:.0f} ms, the fastest took {med['fastest_ms']:.0f} ms"
            + (
                f"; the processes' first runs {med['gap_ms']:.0f} ms apart (sampled every 20 ms), "
                f"runs held at most {watch.peaks(k)} (last rep)"
                + (
                    f"; CPU a run {med['cpu_ms']:.2f} ms in the worker processes, "
                    f"{med['supervisor_cpu_ms']:.3f} ms in the supervisor (bare arq: {med['arq_cpu_ms']:.2f} ms a job)"
                    if self.warm(k)
                    else ""
                )
                if k > 1
                else ""
            )
            + f"; peak RSS {med['rss_peak_mb']:.0f} MB, {med['kb_per_run']:.0f} KB per run (target ≤ 150 KB)"
            + (
                f"; collector {med['gc_ms']:.0f} ms in {med['gc_passes']:.0f} passes; "
                f"loop lag p99 {med['lag_p99_ms']:.1f} ms (target < 50 ms)"
                if k == 1
                else ""
            )
            + f" (medians of {a.reps})"
        )
        self.figures.append(f)

    async def agentmill_drain(
        self, r: Redis, n: int, k: int, watch: ProcessWatch
    ) -> tuple[float, dict[str, float]]:
        """``n`` runs of a 1 s model reply through ``k`` processes: the span (s), and what the
        worker noted (the one-process probe's loop lag and collector, RSS, the starts' spread)."""
        a = self.args
        await self.flush(r)
        stats = Path(f"/tmp/agentmill-bench-lag-{os.getpid()}-{n}.json")
        argv = ["-m", "app.cli", "worker", "--processes", str(k)] if k > 1 else ["-m", "bench.worker_probe"]
        env = {"AGENTMILL_MAX_JOBS": str(slots(n, k))}
        if k == 1:
            env |= {
                "AGENTMILL_BENCH_STATS": str(stats),
                "AGENTMILL_BENCH_PROFILE": f"{a.profile}-{n}.json" if a.profile else "",
                "AGENTMILL_BENCH_STALLS": f"{a.stalls}-{n}.json" if a.stalls else "",
            }
        box: list[subprocess.Popen[bytes]] = []
        cpu0 = (0.0, 0.0)
        runs = [self.script_run([{"text": "ok", "delayMs": 1000}])] * n
        if self.warm(k):
            box.append(self.spawn(argv, **env))
            await self.until(lambda: self.count_workers(r), k)
            cpu0 = tree_cpu_s(box[0].pid)
            with paused([box[0].pid, *children(box[0].pid)]):
                await self.producer(r).submit_many(runs)
        else:
            await self.producer(r).submit_many(runs)

        async def done() -> bool:
            if k > 1:
                await watch.sample(r)
            return await self.runs_done(r)

        def start_once() -> None:
            if not box:
                box.append(self.spawn(argv, **env))

        t = await self.drain_time(r, n, start_once, done)
        spread, fastest = self.last_spread_ms
        cpu1 = tree_cpu_s(box[0].pid) if self.warm(k) else (float("nan"), float("nan"))
        rss_peak = tree_kib(box[0].pid, "VmHWM")
        idle_rss = tree_kib(box[0].pid, "VmRSS")
        self.stop(box[0])
        got = await asyncio.to_thread(read_json, stats)
        return t, {
            "spread_ms": spread,
            "fastest_ms": fastest,
            "kb_per_run": max(0, rss_peak - got.get("rss_start", idle_rss)) / n / 1e3,
            "rss_peak_mb": rss_peak / 1e6,
            "lag_p99_ms": got.get("lag_p99_ms", float("nan")),
            "gc_ms": sum(got.get("gc_ms") or [0.0]),
            "gc_passes": sum(got.get("gc_count") or [0]),
            "gap_ms": watch.gap_ms(),
            # CPU a run from the submission to the drained queue (a warm start only): the worker
            # processes', and the supervisor's beside them
            "cpu_ms": (cpu1[1] - cpu0[1]) / n * 1e3,
            "supervisor_cpu_ms": (cpu1[0] - cpu0[0]) / n * 1e3,
        }

    async def bare_arq_drain(self, r: Redis, n: int, k: int) -> tuple[float, float]:
        """The same in-flight count of bare arq jobs that only sleep 1 s, on as many arq processes,
        each with the same share of slots: what arq itself reaches (the span, s), and the arq
        processes' CPU a job (ms; a warm start only)."""
        await self.flush(r)
        argv = ["-m", "arq", "bench.bare_arq.WorkerSettings"]
        procs: list[subprocess.Popen[bytes]] = []

        def start() -> None:
            procs.extend(self.spawn(argv, AGENTMILL_MAX_JOBS=str(slots(n, k))) for _ in range(k))

        cpu0 = 0.0
        if self.warm(k):
            start()
            await self.until(lambda: self.count_arq(r), k)
            cpu0 = sum(process_cpu_s(p.pid) for p in procs)
            with paused([p.pid for p in procs]):
                await self.raw_enqueue(r, n, prefix="sleep", function="sleep1")
        else:
            await self.raw_enqueue(r, n, prefix="sleep", function="sleep1")

        def start_once() -> None:
            if not procs:
                start()

        t = await self.drain_time(r, n, start_once, lambda: self.arq_done(r))
        cpu = (sum(process_cpu_s(p.pid) for p in procs) - cpu0) / n * 1e3 if self.warm(k) else float("nan")
        for p in procs:
            self.stop(p)
        return t, cpu

    async def count_workers(self, r: Redis) -> int:
        return int(await r.zcard(K.workers))

    async def count_arq(self, r: Redis) -> int:
        return int(await r.get(ARQ_UP) or 0)

    async def until(self, count: Callable[[], Awaitable[int]], k: int, within: float = 120.0) -> None:
        """Until ``count()`` reaches ``k`` processes, then a moment more (their first polls done, now
        idle in their waits)."""
        deadline = time.monotonic() + within
        while await count() < k:
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {await count()} of {k} processes started")
            await asyncio.sleep(0.05)
        await asyncio.sleep(IDLE_S)
