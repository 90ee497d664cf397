"""Figures 5–7: latencies to readers, batch submission, HTTP ledger tools."""

from __future__ import annotations

import asyncio
import statistics
import subprocess
import time
from typing import Any

import httpx
import orjson
from redis.asyncio import Redis

from bench.figure import Figure
from bench.plumbing import ROOT, Plumbing
from bench.probes import pct, raw_xadd_latency, sse_latency, tail_latency
from bench.resume_latency import approval_latencies, client_tool_latencies, resume_profiles
from tests.support.schema import K

LATENCY = "p50 ≤ 5 ms, p99 ≤ 15 ms"


class IoFigures(Plumbing):
    async def fig_latency(self, r: Redis) -> None:
        await self.flush(r)
        profiles = resume_profiles()
        p = self.producer(r, profiles=profiles)
        w = self.spawn(["-m", "app.worker"], AGENTMILL_PROFILES=profiles)
        await self.wait_started(r)
        await asyncio.sleep(0.3)
        lat: list[float] = []
        for _ in range(self.args.latency_samples):
            t0 = time.perf_counter()
            sub = await p.submit(self.script_run([{"text": "hi"}]))
            await r.xread({K.events(sub.run_id): "0-0"}, count=1, block=5000)
            lat.append((time.perf_counter() - t0) * 1000)
            await asyncio.sleep(0.01)
        f = Figure("5a. submit → first `status running` event, idle pool (p50 / p99)", "ms", target=LATENCY)
        f.ours = [statistics.median(lat), pct(lat, 99)]
        f.note = f"p50 {statistics.median(lat):.1f} ms, p99 {pct(lat, 99):.1f} ms over {len(lat)} runs"
        self.figures.append(f)
        # A parked run answered: the worker back in its wait, as after submit.
        idle_s = 2 * self.args.poll_delay + 0.05
        for what, measure in (
            ("a client tool result", client_tool_latencies),
            ("an approval", approval_latencies),
        ):
            lat = await measure(r, p, self.args.latency_samples, idle_s)
            f = Figure(f"5a. {what} → the run's next event, idle pool (p50 / p99)", "ms", target=LATENCY)
            f.ours = [statistics.median(lat), pct(lat, 99)]
            f.note = (
                f"p50 {statistics.median(lat):.1f} ms, p99 {pct(lat, 99):.1f} ms over {len(lat)} parked runs, "
                f"answered through the Producer {idle_s * 1000:.0f} ms after they parked"
            )
            self.figures.append(f)
        # Event publish → a Redis tail in another process: ours (worker → stream) vs raw XADD → XREAD.
        sub = await p.submit(self.script_run([{"text": "x" * 4000, "delayMs": 4000}]))
        ours = await tail_latency(self.server.url, K.events(sub.run_id), 3.5)
        raw = await raw_xadd_latency(self.server.url)
        self.stop(w)
        f = Figure(
            "5b. event publish → received by a Redis tail (p99)",
            "ms",
            base_name="raw XADD → XREAD BLOCK",
            target="p99 < 2 ms",
        )
        f.ours, f.base = [pct(ours, 99)], [pct(raw, 99)]
        f.higher_is_better = False
        f.note = f"ours p50 {statistics.median(ours):.2f} ms (n={len(ours)}); raw p50 {statistics.median(raw):.2f} ms; ours includes the commit script"
        self.figures.append(f)
        # The same through the API's Server-Sent Events, read by a client in another process.
        w = self.spawn(["-m", "app.worker"])
        api, url = await self.spawn_api()
        await self.wait_started(r)
        sub = await p.submit(self.script_run([{"text": "x" * 4000, "delayMs": 4000}]))
        sse = await sse_latency(url, sub.run_id, 8.0)
        self.stop(api)
        self.stop(w)
        f = Figure(
            "5c. event publish → received by an SSE client (p99)",
            "ms",
            base_name="raw XADD → XREAD BLOCK",
            target="p99 < 20 ms",
        )
        f.ours, f.base = [pct(sse, 99)], [pct(raw, 99)]
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
                        lambda box=box: box.append(  # type: ignore[misc]
                            self.spawn(["-m", "app.worker"], AGENTMILL_PROFILES=str(profiles))
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
