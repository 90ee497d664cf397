"""agentmill's benchmark: ``bin/dev bench`` (or ``python -m bench``), options with ``--help``.

Starts its own redis-server on a free port and measures every figure next to a baseline taken in
the same run, so the ratios hold on a shared, noisy machine. Prints a table of medians with
min–max over the repetitions and writes JSON (bench/results/latest.json by default).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
from redis.asyncio import Redis

from producer.service import Producer
from shared import keys
from shared.profiles import profiles_from
from shared.redis_server import RedisServer, free_port
from shared.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
# The bench drives runs with the test-only `scripted` profile; its workers inherit this.
os.environ.setdefault("AGENTMILL_DEV_PROFILES", "true")


@dataclass
class Figure:
    name: str
    unit: str
    ours: list[float] = field(default_factory=list)
    base: list[float] = field(default_factory=list)
    base_name: str = ""
    target: str = ""
    higher_is_better: bool = True
    note: str = ""

    def med(self, xs: list[float]) -> float:
        return statistics.median(xs) if xs else float("nan")

    def ratio(self) -> float | None:
        if not self.ours or not self.base:
            return None
        b = self.med(self.base)
        return self.med(self.ours) / b if b else None

    def row(self) -> dict[str, Any]:
        return {
            "figure": self.name,
            "unit": self.unit,
            "ours": {
                "median": self.med(self.ours),
                "min": min(self.ours, default=None),
                "max": max(self.ours, default=None),
                "samples": self.ours,
            },
            "baseline": {
                "name": self.base_name,
                "median": self.med(self.base) if self.base else None,
                "samples": self.base,
            },
            "ratio": self.ratio(),
            "target": self.target,
            "note": self.note,
        }


def fmt(xs: list[float]) -> str:
    if not xs:
        return "–"
    m = statistics.median(xs)
    if len(xs) == 1:
        return f"{m:,.3g}"
    return f"{m:,.3g} ({min(xs):,.3g}–{max(xs):,.3g})"


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.figures: list[Figure] = []
        self.server = RedisServer()
        self.procs: list[subprocess.Popen[bytes]] = []

    # ---- plumbing ----

    def env(self, **extra: str) -> dict[str, str]:
        return {
            **os.environ,
            "REDIS_URL": self.server.url,
            "AGENTMILL_WORKER_METRICS_PORT": "-1",
            "AGENTMILL_POLL_DELAY_S": str(self.args.poll_delay),
            "AGENTMILL_LOG_LEVEL": "WARNING",
            # One tenant's raw throughput is measured: no per-tenant quotas (they cost nothing
            # extra per run beyond one claim-script lookup, but would cap the figures).
            "AGENTMILL_TENANT_MAX_RUNNING": "0",
            "AGENTMILL_TENANT_MAX_ACTIVE": "0",
            "AGENTMILL_TENANT_SUBMITS_PER_SECOND": "0",
            **extra,
        }

    def spawn(self, argv: list[str], **env: str) -> subprocess.Popen[bytes]:
        p = subprocess.Popen(
            [sys.executable, *argv],
            cwd=ROOT,
            env=self.env(**env),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.procs.append(p)
        return p

    async def spawn_api(self) -> tuple[subprocess.Popen[bytes], str]:
        """`agentmill api` as its own process, auth off; returns it and its base URL once ready."""
        port = free_port()
        p = self.spawn(
            ["-m", "producer.cli", "api"],
            AGENTMILL_API_PORT=str(port),
            AGENTMILL_AUTH_DISABLED="true",
            AGENTMILL_MAX_QUEUE_DEPTH="10000000",
        )
        url = f"http://127.0.0.1:{port}"
        async with httpx.AsyncClient() as c:
            for _ in range(600):
                with contextlib.suppress(httpx.HTTPError):
                    if (await c.get(f"{url}/readyz")).status_code == 200:
                        return p, url
                await asyncio.sleep(0.05)
        raise RuntimeError("the API did not start")

    def stop(self, p: subprocess.Popen[bytes]) -> None:
        if p.poll() is None:
            p.terminate()
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    async def flush(self, r: Redis) -> None:
        await r.flushall()

    async def wait_started(self, r: Redis, within: float = 20.0) -> None:
        """arq records its health key at its first poll: the worker is up and polling."""
        deadline = time.monotonic() + within
        while not await r.exists(keys.QUEUE + ":health-check"):
            if time.monotonic() > deadline:
                raise RuntimeError("worker did not start")
            await asyncio.sleep(0.01)

    async def drain_time(
        self, r: Redis, n: int, start: Callable[[], Any], done: Callable[[], Awaitable[bool]]
    ) -> float:
        """Start the worker on a pre-filled queue, wait until all is done, and return the span from
        the first job's start to the last job's finish as arq's result records state them."""
        start()
        deadline = time.monotonic() + 600
        while not await done():
            if time.monotonic() > deadline:
                raise RuntimeError("the queue did not drain in 10 minutes")
            await asyncio.sleep(0.01)
        starts, ends = [], []
        async for key in r.scan_iter(match="arq:result:*", count=1000):
            raw = await r.get(key)
            if raw:
                d = orjson.loads(raw)
                starts.append(d["st"])
                ends.append(d["ft"])
        if len(starts) < n:
            raise RuntimeError(f"only {len(starts)} of {n} jobs left a result")
        return (max(ends) - min(starts)) / 1000.0

    async def arq_done(self, r: Redis) -> bool:
        return await r.zcard(keys.QUEUE) == 0 and not await r.keys("arq:in-progress:*")

    async def runs_done(self, r: Redis) -> bool:
        return await r.zcard(keys.LIVE) == 0 and await self.arq_done(r)

    async def raw_enqueue(self, r: Redis, n: int, prefix: str = "noop", function: str = "noop") -> None:
        now = int(time.time() * 1000)
        async with r.pipeline(transaction=False) as pipe:
            for i in range(n):
                jid = f"{prefix}{i}"
                pipe.set(
                    keys.arq_job_key(jid),
                    orjson.dumps({"t": None, "f": function, "a": [], "k": {}, "et": now}),
                    px=86_400_000,
                )
                pipe.zadd(keys.QUEUE, {jid: now})
            await pipe.execute()

    def producer(self, r: Redis, **settings: Any) -> Producer:
        settings.setdefault("max_batch", 100_000)
        s = Settings(redis_url=self.server.url, **settings)
        return Producer(r, settings=s, profiles=profiles_from(s.profiles))

    @staticmethod
    def script_run(script: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "agent": "scripted",
            "inputMessages": [{"role": "user", "content": "bench"}],
            "runtimeHints": {"script": script},
        }

    # ---- figures ----

    async def fig_throughput(self, r: Redis) -> None:
        a = self.args
        f = Figure(
            "1. one-step runs/s, one worker process",
            "runs/s",
            base_name="bare arq no-op job",
            target="≥ 0.5 × bare arq",
        )
        for _ in range(a.reps):
            await self.flush(r)
            await self.raw_enqueue(r, a.runs)
            box: list[subprocess.Popen[bytes]] = []
            t = await self.drain_time(
                r,
                a.runs,
                lambda box=box: box.append(self.spawn(["-m", "arq", "bench.bare_arq.WorkerSettings"])),
                lambda: self.arq_done(r),
            )
            f.base.append(a.runs / t)
            self.stop(box[0])
            await self.flush(r)
            await self.producer(r).submit_many([self.script_run([{"text": "hi"}])] * a.runs)
            t = await self.drain_time(
                r, a.runs, lambda box=box: box.append(self.spawn(["-m", "worker"])), lambda: self.runs_done(r)
            )
            f.ours.append(a.runs / t)
            self.stop(box[1])
        self.figures.append(f)

    async def fig_steps(self, r: Redis, per_step_rtt: int, per_step_cmds: int) -> None:
        a = self.args
        f = Figure(
            "2. steps/s of ten-step runs (one tool call a step)",
            "steps/s",
            base_name=f"raw agent step ({per_step_cmds} cmds in {per_step_rtt} round trips)",
            target="≥ 0.5 × raw step",
        )
        n = a.step_runs
        script = [{"toolCalls": [{"name": "echo", "arguments": {"text": "x"}}]}] * 10 + [{"text": "done"}]
        for _ in range(a.reps):
            await self.flush(r)
            await self.producer(r).submit_many([self.script_run(script)] * n)
            box: list[subprocess.Popen[bytes]] = []
            t = await self.drain_time(
                r, n, lambda box=box: box.append(self.spawn(["-m", "worker"])), lambda: self.runs_done(r)
            )
            f.ours.append(n * 10 / t)
            self.stop(box[0])
            f.base.append(await self.raw_steps(r, n, per_step_rtt, per_step_cmds))
        self.figures.append(f)

    async def raw_steps(self, r: Redis, runs: int, rtt: int, cmds: int) -> float:
        """The same Redis work as our steps, without arq or the agent: many tasks, pipelined."""
        await self.flush(r)
        per_rt = max(1, cmds // max(1, rtt))
        payload = b'{"kind":"tool_result","content":"x"}'

        async def one_run(i: int) -> None:
            stream, h = f"raw:{{{i}}}:events", f"raw:{{{i}}}:run"
            for s in range(10):
                for _ in range(rtt):
                    async with r.pipeline(transaction=False) as pipe:
                        for k in range(per_rt):
                            if k % 3 == 0:
                                pipe.xadd(stream, {"seq": s, "payload": payload})
                            elif k % 3 == 1:
                                pipe.hset(h, "ckpt", payload)
                            else:
                                pipe.zadd("raw:live", {str(i): s})
                        await pipe.execute()

        t0 = time.perf_counter()
        await asyncio.gather(*(one_run(i) for i in range(runs)))
        return runs * 10 / (time.perf_counter() - t0)

    async def fig_cost(self, r: Redis) -> tuple[int, int]:
        """Redis commands (server side, INFO commandstats) and round trips (client side) per run and per step."""
        from worker import redis_store as store_mod
        from worker.jobs import WorkerProcess

        counts = {"rtt": 0}
        orig_exec = Redis.execute_command
        from redis.asyncio.client import Pipeline

        orig_pipe = Pipeline.execute

        async def counted(self: Redis, *args: Any, **kw: Any) -> Any:
            counts["rtt"] += 1
            return await orig_exec(self, *args, **kw)

        async def counted_pipe(self: Pipeline, *args: Any, **kw: Any) -> Any:
            counts["rtt"] += 1
            return await orig_pipe(self, *args, **kw)

        store_rtt = {"n": 0}
        orig_commit = store_mod.RedisRunStore.commit
        orig_acquire = store_mod.RedisRunStore.acquire

        async def c_commit(self: store_mod.RedisRunStore, *args: Any, **kw: Any) -> int:
            store_rtt["n"] += 1
            return await orig_commit(self, *args, **kw)

        async def c_acquire(self: store_mod.RedisRunStore, *args: Any, **kw: Any) -> Any:
            store_rtt["n"] += 1
            return await orig_acquire(self, *args, **kw)

        results: dict[int, dict[str, float]] = {}
        n = self.args.cost_runs
        for steps in (0, 10):
            await self.flush(r)
            script = [{"toolCalls": [{"name": "echo", "arguments": {"text": "x"}}]}] * steps + [
                {"text": "done"}
            ]
            await self.producer(r).submit_many([self.script_run(script)] * n)
            await r.config_resetstat()
            counts["rtt"] = 0
            store_rtt["n"] = 0
            Redis.execute_command = counted  # type: ignore[method-assign]
            Pipeline.execute = counted_pipe  # type: ignore[method-assign]
            store_mod.RedisRunStore.commit = c_commit  # type: ignore[method-assign]
            store_mod.RedisRunStore.acquire = c_acquire  # type: ignore[method-assign]
            try:
                wp = WorkerProcess(
                    Settings(
                        redis_url=self.server.url,
                        poll_delay_s=self.args.poll_delay,
                        heartbeat_ms=60_000,
                        reconcile_ms=60_000,
                        worker_metrics_port=-1,
                    )
                )
                task = asyncio.create_task(wp.run())
                probe = Redis.from_url(self.server.url)
                try:
                    while not (
                        await probe.zcard(keys.LIVE) == 0
                        and await probe.zcard(keys.QUEUE) == 0
                        and not wp.deps.active
                    ):
                        await asyncio.sleep(0.01)
                finally:
                    await probe.aclose()
                client_rtt = counts["rtt"]
                wp.request_stop()
                await task
            finally:
                Redis.execute_command = orig_exec  # type: ignore[method-assign]
                Pipeline.execute = orig_pipe  # type: ignore[method-assign]
                store_mod.RedisRunStore.commit = orig_commit  # type: ignore[method-assign]
                store_mod.RedisRunStore.acquire = orig_acquire  # type: ignore[method-assign]
            stats = await r.info("commandstats")
            server_cmds = sum(
                v["calls"]
                for k, v in stats.items()
                if not k.startswith(
                    ("cmdstat_info", "cmdstat_config", "cmdstat_zcard", "cmdstat_evalsha", "cmdstat_script")
                )
            )
            results[steps] = {
                "client_rtt": client_rtt / n,
                "store_rtt": store_rtt["n"] / n,
                "server_cmds": server_cmds / n,
            }
        fixed, ten = results[0], results[10]
        per_step = {k: (ten[k] - fixed[k]) / 10 for k in fixed}
        for label, key in (
            ("agentmill round trips (acquire + commits)", "store_rtt"),
            ("all client round trips incl. arq", "client_rtt"),
            ("Redis commands run by the server", "server_cmds"),
        ):
            f = Figure(
                f"3. {label}: per step / per run fixed",
                "count",
                target="≤ 2 round trips per step" if key == "store_rtt" else "",
            )
            f.ours = [per_step[key]]
            f.note = f"fixed per run: {fixed[key]:.1f}; 10-step run: {ten[key]:.1f}"
            self.figures.append(f)
        return max(1, round(per_step["store_rtt"])), max(1, round(per_step["server_cmds"]))

    async def fig_heartbeat(self, r: Redis) -> None:
        """Figure 4b: the Redis work of a worker whose runs all wait on their model, by runs in flight.
        Liveness is one lease per worker, so it must not grow with the runs (it used to be a renewal
        script per run per beat: about 8 commands per run per second)."""
        base = 0.0
        for n in self.args.beat_inflight:
            await self.flush(r)
            await self.producer(r).submit_many([self.script_run([{"text": "ok", "delayMs": 30_000}])] * n)
            w = self.spawn(["-m", "worker"], AGENTMILL_MAX_JOBS=str(n + 10))
            deadline = time.monotonic() + 120
            while True:  # every run acquired: in its worker's runs set
                ids = await r.zrange(keys.WORKERS, 0, -1)
                held = await r.scard(keys.worker_runs_key(ids[0].decode())) if ids else 0  # type: ignore[misc]
                if held >= n:
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"only {held} of {n} runs started")
                await asyncio.sleep(0.1)
            await asyncio.sleep(1.0)  # past the start-up commits
            await r.config_resetstat()
            t0 = time.perf_counter()
            await asyncio.sleep(self.args.beat_seconds)
            stats = await r.info("commandstats")
            span = time.perf_counter() - t0
            self.stop(w)
            calls = {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in stats.items()}
            calls.pop("config", None)
            calls.pop("info", None)
            per_s = sum(calls.values()) / span
            beats = calls.get("lpop", 0)  # only the heartbeat script pops (the worker's inbox)
            beat_cmds = sum(calls.get(c, 0) for c in ("lpop", "zscore", "zadd")) + beats  # + its EVALSHA
            base = base or per_s
            f = Figure(
                f"4b. Redis commands/s of one worker, {n} runs waiting on the model",
                "cmds/s",
                base_name=f"the same with {self.args.beat_inflight[0]} runs",
                target="flat: does not grow with runs in flight",
                higher_is_better=False,
            )
            f.ours, f.base = [per_s], [base]
            f.note = (
                f"{beats / span:.1f} beats/s, {beat_cmds / max(1, beats):.0f} commands per beat "
                f"(EVALSHA, ZSCORE, ZADD, LPOP); the rest is arq's poll loop and the reconciler sweep"
            )
            self.figures.append(f)

    async def fig_concurrency(self, r: Redis) -> None:
        for n in self.args.inflight:
            await self.flush(r)
            await self.producer(r).submit_many([self.script_run([{"text": "ok", "delayMs": 1000}])] * n)
            stats_path = Path(f"/tmp/agentmill-bench-lag-{os.getpid()}-{n}.json")
            box: list[subprocess.Popen[bytes]] = []
            idle_rss = 0

            def start(box: list[subprocess.Popen[bytes]] = box, n: int = n, stats: Path = stats_path) -> None:
                box.append(
                    self.spawn(
                        ["-m", "bench.worker_probe"],
                        AGENTMILL_MAX_JOBS=str(n + 10),
                        AGENTMILL_BENCH_STATS=str(stats),
                    )
                )

            t = await self.drain_time(r, n, start, lambda: self.runs_done(r))
            rss_peak = _vm(box[0].pid, "VmHWM")
            idle_rss = _vm(box[0].pid, "VmRSS")
            self.stop(box[0])
            lag = await asyncio.to_thread(_read_json, stats_path)
            # The same in-flight count of bare arq jobs that only sleep 1 s: what arq itself reaches.
            await self.flush(r)
            await self.raw_enqueue(r, n, prefix="sleep", function="sleep1")
            bare = await self.drain_time(
                r,
                n,
                lambda box=box, n=n: box.append(
                    self.spawn(["-m", "arq", "bench.bare_arq.WorkerSettings"], AGENTMILL_MAX_JOBS=str(n + 10))
                ),
                lambda: self.arq_done(r),
            )
            self.stop(box[-1])
            f = Figure(
                f"4. {n} runs in flight, model latency 1 s",
                "runs/s",
                base_name="ideal (in-flight ÷ latency)",
                target="1,000 in flight ≥ 80 % of ideal",
            )
            f.ours = [n / t]
            f.base = [float(n)]
            f.note = (
                f"peak RSS {rss_peak / 1e6:.0f} MB, {max(0, rss_peak - lag.get('rss_start', idle_rss)) / n / 1e3:.0f} KB per run "
                f"(target ≤ 150 KB); loop lag p99 {lag.get('lag_p99_ms', float('nan')):.1f} ms (target < 50 ms); "
                f"bare arq jobs sleeping 1 s: {n / bare:.0f}/s ({n / bare / n:.2f} of ideal)"
            )
            self.figures.append(f)

    async def fig_latency(self, r: Redis) -> None:
        await self.flush(r)
        p = self.producer(r)
        w = self.spawn(["-m", "worker"])
        await self.wait_started(r)
        await asyncio.sleep(0.3)
        lat: list[float] = []
        for _ in range(self.args.latency_samples):
            t0 = time.perf_counter()
            sub = await p.submit(self.script_run([{"text": "hi"}]))
            await r.xread({keys.events_stream(sub.run_id): "0-0"}, count=1, block=5000)
            lat.append((time.perf_counter() - t0) * 1000)
            await asyncio.sleep(0.01)
        f = Figure(
            "5a. submit → first `status running` event, idle pool (p50 / p99)", "ms", target="p99 < 100 ms"
        )
        f.ours = [statistics.median(lat), _pct(lat, 99)]
        f.note = f"p50 {statistics.median(lat):.1f} ms, p99 {_pct(lat, 99):.1f} ms over {len(lat)} runs"
        self.figures.append(f)
        # Event publish → a Redis tail in another process: ours (worker → stream) vs raw XADD → XREAD.
        sub = await p.submit(self.script_run([{"text": "x" * 4000, "delayMs": 4000}]))
        ours = await _tail_latency(self.server.url, keys.events_stream(sub.run_id), 3.5)
        raw = await _raw_xadd_latency(self.server.url)
        self.stop(w)
        f = Figure(
            "5b. event publish → received by a Redis tail (p99)",
            "ms",
            base_name="raw XADD → XREAD BLOCK",
            target="p99 < 2 ms",
        )
        f.ours, f.base = [_pct(ours, 99)], [_pct(raw, 99)]
        f.higher_is_better = False
        f.note = f"ours p50 {statistics.median(ours):.2f} ms (n={len(ours)}); raw p50 {statistics.median(raw):.2f} ms; ours includes the commit script"
        self.figures.append(f)
        # The same through the API's Server-Sent Events, read by a client in another process.
        w = self.spawn(["-m", "worker"])
        api, url = await self.spawn_api()
        await self.wait_started(r)
        sub = await p.submit(self.script_run([{"text": "x" * 4000, "delayMs": 4000}]))
        sse = await _sse_latency(url, sub.run_id, 8.0)
        self.stop(api)
        self.stop(w)
        f = Figure(
            "5c. event publish → received by an SSE client (p99)",
            "ms",
            base_name="raw XADD → XREAD BLOCK",
            target="p99 < 20 ms",
        )
        f.ours, f.base = [_pct(sse, 99)], [_pct(raw, 99)]
        f.higher_is_better = False
        f.note = f"ours p50 {statistics.median(sse):.2f} ms (n={len(sse)}), through `agentmill api` in its own process"
        self.figures.append(f)

    async def fig_batch(self, r: Redis) -> None:
        n = 1000
        f = Figure(
            "6. batch submission of 1,000 runs",
            "runs/s",
            base_name="raw pipelined arq enqueue",
            target="≥ 0.5 × raw",
        )
        producer = self.producer(
            r
        )  # long-lived, as in an application (the raw baseline reuses its client too)
        for _ in range(self.args.reps):
            await self.flush(r)
            t0 = time.perf_counter()
            await self.raw_enqueue(r, n)
            f.base.append(n / (time.perf_counter() - t0))
            await self.flush(r)
            items = [self.script_run([{"text": "hi"}]) for _ in range(n)]
            t0 = time.perf_counter()
            await producer.submit_many(items)
            f.ours.append(n / (time.perf_counter() - t0))
        f.note = "through the Python producer (validation, then one Lua call per 100 runs, each sent as soon as it is ready)"
        self.figures.append(f)
        api, url = await self.spawn_api()
        g = Figure(
            "6b. batch submission of 1,000 runs in one API request",
            "runs/s",
            base_name="raw pipelined arq enqueue",
            target="≥ 0.5 × raw",
        )
        body = orjson.dumps({"runs": [self.script_run([{"text": "hi"}]) for _ in range(n)]})
        async with httpx.AsyncClient(timeout=60) as c:
            for _ in range(self.args.reps):
                # The baseline again, beside each request: on a shared machine, one taken during
                # figure 6 seconds earlier says little about the load this request meets.
                await self.flush(r)
                t0 = time.perf_counter()
                await self.raw_enqueue(r, n)
                g.base.append(n / (time.perf_counter() - t0))
                await self.flush(r)
                t0 = time.perf_counter()
                resp = await c.post(
                    f"{url}/v1/runs/batch", content=body, headers={"Content-Type": "application/json"}
                )
                g.ours.append(n / (time.perf_counter() - t0))
                accepted = sum(1 for x in resp.json()["results"] if x.get("runId") and not x.get("error"))
                if resp.status_code >= 300 or accepted != n:
                    raise RuntimeError(f"batch answered {resp.status_code} with {accepted} of {n} accepted")
        self.stop(api)
        g.note = "POST /v1/runs/batch to `agentmill api` in its own process: HTTP, JSON parsing, validation, enqueue"
        self.figures.append(g)

    async def fig_ledger(self, r: Redis) -> None:
        """Figure 7: steps whose tool is an HTTP call to the chaos ledger (claim, call with an
        Idempotency-Key, record) against the same runs with the in-process echo tool."""
        from tests.chaos.harness import chaos_profiles
        from tests.support.ledger import Ledger

        n = self.args.step_runs
        f = Figure(
            "7. steps/s of ten-step runs whose tool is an HTTP ledger call",
            "steps/s",
            base_name="the same runs with the in-process echo tool",
            target="(no target; shows the HTTP tool's cost)",
        )
        with Ledger() as ledger:
            (ROOT / "bench" / "results").mkdir(parents=True, exist_ok=True)
            profiles = chaos_profiles(ledger.url, ROOT / "bench" / "results" / "ledger-profiles.json")
            for tool in ("echo", "ledger"):
                args: dict[str, Any] = {"text": "x"} if tool == "echo" else {"step": 1}
                script = [{"toolCalls": [{"name": tool, "arguments": args}]}] * 10 + [{"text": "done"}]
                body = {**self.script_run(script), "agent": "chaos"}
                for _ in range(self.args.reps):
                    await self.flush(r)
                    await self.producer(r, profiles=str(profiles)).submit_many([body] * n)
                    box: list[subprocess.Popen[bytes]] = []
                    t = await self.drain_time(
                        r,
                        n,
                        lambda box=box: box.append(
                            self.spawn(["-m", "worker"], AGENTMILL_PROFILES=str(profiles))
                        ),
                        lambda: self.runs_done(r),
                    )
                    (f.base if tool == "echo" else f.ours).append(n * 10 / t)
                    self.stop(box[0])
            executions = ledger.counts()
        once = sum(1 for v in executions.values() if v == 1)
        f.note = (
            f"{len(executions)} distinct Idempotency-Keys reached the ledger, {once} exactly once; "
            "checkpoints and tool records cannot be switched off (they are the guarantee), so the "
            "baseline keeps them and drops only the HTTP call"
        )
        self.figures.append(f)

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
        return "\n".join(lines)

    async def run(self) -> None:
        a = self.args
        self.server.start()
        r = Redis.from_url(self.server.url)
        try:
            rtt, cmds = 1, 1
            if "cost" in a.only or "steps" in a.only:
                rtt, cmds = await self.fig_cost(r)
            figures: list[tuple[str, Callable[[], Awaitable[None]]]] = [
                ("throughput", lambda: self.fig_throughput(r)),
                ("steps", lambda: self.fig_steps(r, rtt, cmds)),
                ("concurrency", lambda: self.fig_concurrency(r)),
                ("heartbeat", lambda: self.fig_heartbeat(r)),
                ("latency", lambda: self.fig_latency(r)),
                ("batch", lambda: self.fig_batch(r)),
                ("ledger", lambda: self.fig_ledger(r)),
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
            for p in self.procs:
                self.stop(p)
            await r.aclose()
            self.server.close()


def _read_json(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    data: dict[str, Any] = json.loads(path.read_text())
    path.unlink(missing_ok=True)
    return data


def _vm(pid: int, field_name: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field_name + ":"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _pct(xs: list[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(len(s) * p / 100))] if s else float("nan")


TAIL = r"""
import sys, time, redis
r = redis.Redis.from_url(sys.argv[1]); key = sys.argv[2]; until = time.time() + float(sys.argv[3]); last = '0-0'; out = []
start = time.time() * 1000  # events published before the reader listened are backlog, not latency
while time.time() < until:
    got = r.xread({key: last}, block=200)
    now = time.time() * 1000
    for _, entries in got or []:
        for eid, f in entries:
            last = eid
            if float(f[b'ts']) >= start:
                out.append(now - float(f[b'ts']))
print(','.join(f'{x:.3f}' for x in out))
"""

WRITER = r"""
import sys, time, redis
r = redis.Redis.from_url(sys.argv[1])
for i in range(int(sys.argv[3])):
    r.xadd(sys.argv[2], {'ts': repr(time.time() * 1000)})
    time.sleep(0.02)
"""


SSE_TAIL = r"""
import sys, time, json, httpx
url, run_id, until = sys.argv[1], sys.argv[2], time.time() + float(sys.argv[3]); out = []
with httpx.stream("GET", f"{url}/v1/runs/{run_id}/events", timeout=None) as resp:
    start = time.time() * 1000  # the stream is open: earlier events are backlog, not latency
    for line in resp.iter_lines():
        if line.startswith("data:"):
            now, ts = time.time() * 1000, float(json.loads(line[5:])["ts"])
            if ts >= start:
                out.append(now - ts)
        if time.time() > until:
            break
print(','.join(f'{x:.3f}' for x in out))
"""


async def _probe(script: str, *args: str) -> list[float]:
    """Run a reader in its own process; it prints its latencies (ms) comma-separated."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", script, *args, stdout=asyncio.subprocess.PIPE
    )
    out, _ = await proc.communicate()
    return [float(x) for x in out.decode().strip().split(",") if x]


async def _sse_latency(url: str, run_id: str, seconds: float) -> list[float]:
    return await _probe(SSE_TAIL, url, run_id, str(seconds))


async def _tail_latency(url: str, key: str, seconds: float) -> list[float]:
    return await _probe(TAIL, url, key, str(seconds))


async def _raw_xadd_latency(url: str, n: int = 150) -> list[float]:
    key = "bench:raw:stream"
    reader = asyncio.create_task(_tail_latency(url, key, n * 0.02 + 1.0))
    await asyncio.sleep(0.3)
    writer = await asyncio.create_subprocess_exec(sys.executable, "-c", WRITER, url, key, str(n))
    await writer.wait()
    return await reader


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--runs", type=int, default=1000, help="one-step runs per repetition (figure 1)")
    ap.add_argument("--step-runs", type=int, default=100, help="ten-step runs per repetition (figure 2)")
    ap.add_argument("--cost-runs", type=int, default=100)
    ap.add_argument("--inflight", type=int, nargs="+", default=[100, 1000, 2000])
    ap.add_argument("--beat-inflight", type=int, nargs="+", default=[100, 1000, 2000], help="figure 4b")
    ap.add_argument("--beat-seconds", type=float, default=3.0, help="figure 4b: how long to count")
    ap.add_argument("--latency-samples", type=int, default=100)
    ap.add_argument("--poll-delay", type=float, default=0.05)
    ap.add_argument(
        "--only",
        nargs="+",
        default=["cost", "throughput", "steps", "concurrency", "heartbeat", "latency", "batch", "ledger"],
    )
    ap.add_argument("--json", type=Path, default=ROOT / "bench" / "results" / "latest.json")
    args = ap.parse_args(argv)
    b = Bench(args)
    t0 = time.monotonic()
    asyncio.run(b.run())
    print(b.table())
    print(f"\n(elapsed {time.monotonic() - t0:.0f} s)")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(
        json.dumps(
            {
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
