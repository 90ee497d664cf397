"""Figure 10: a batch's results exported as JSONL (GET /v1/batches/{id}/results), and what it costs
the API's memory: its peak RSS growth while it streams a 100,000-run batch, beside the same for a
10,000-run batch. Bounded paging shows as the two being about equal."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
from redis.asyncio import Redis

from bench.figure import Figure
from bench.plumbing import Plumbing
from producer.listing import Catalog
from shared.quotas import DEFAULT_TENANT

PART = 10_000  # runs per submit_many call (parts of one batch, placed by their offset)


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for process {pid}")


class ResultsFigures(Plumbing):
    async def _ended_batch(self, r: Redis, batch_id: str, n: int) -> None:
        """n runs in one batch, sent in parts, then aborted (ABORT, the normal path, writes each
        run's result with its lastError): no worker needed to give every run a result line."""
        p = self.producer(r, tenant_submits_per_second=0, tenant_max_active=0, max_queue_depth=10_000_000)
        body = self.script_run([{"text": "hi"}])
        for start in range(0, n, PART):
            size = min(PART, n - start)
            await p.submit_many([body] * size, batch_id=batch_id, offset=start, more=start + size < n)
        await Catalog(p).abort_batch(DEFAULT_TENANT, batch_id, "ended for the bench")

    async def _export(self, url: str, batch_id: str, pid: int) -> tuple[int, int, float, int]:
        """Read the export to its end; (lines, bytes, seconds, the API's peak RSS growth in kB)."""
        base = peak = rss_kb(pid)
        done = False

        async def sample() -> None:
            nonlocal peak
            while not done:
                peak = max(peak, rss_kb(pid))
                await asyncio.sleep(0.005)

        sampler = asyncio.create_task(sample())
        lines = size = 0
        t0 = time.perf_counter()
        async with (
            httpx.AsyncClient(timeout=120) as c,
            c.stream("GET", f"{url}/v1/batches/{batch_id}/results") as resp,
        ):
            resp.raise_for_status()
            async for chunk in resp.aiter_bytes():
                lines += chunk.count(b"\n")
                size += len(chunk)
        took = time.perf_counter() - t0
        done = True
        await sampler
        return lines, size, took, peak - base

    async def fig_results(self, r: Redis) -> None:
        big, small = self.args.results_runs, self.args.results_runs // 10
        await self.flush(r)
        await self._ended_batch(r, "warm", 1_000)
        await self._ended_batch(r, "small", small)
        await self._ended_batch(r, "big", big)
        api, url = await self.spawn_api()
        f = Figure(
            f"10. API peak RSS growth exporting a {big:,}-run batch as JSONL",
            "MB",
            base_name=f"the same for a {small:,}-run batch",
            target="≈ 1 × (bounded: pages of 500 runs per partition)",
        )
        f.higher_is_better = False
        rates: list[float] = []
        sizes = 0
        first = (await self._export(url, "warm", api.pid))[3] / 1024
        for _ in range(self.args.reps):
            lines, _, _, grew = await self._export(url, "small", api.pid)
            if lines != small:
                raise RuntimeError(f"the {small}-run export gave {lines} lines")
            f.base.append(grew / 1024)
            lines, sizes, took, grew = await self._export(url, "big", api.pid)
            if lines != big:
                raise RuntimeError(f"the {big}-run export gave {lines} lines")
            f.ours.append(grew / 1024)
            rates.append(lines / took)
        rss = rss_kb(api.pid) / 1024
        self.stop(api)
        f.note = (
            f"{big:,} lines ({sizes / 1e6:.1f} MB) at {min(rates):,.0f}–{max(rates):,.0f} lines/s; "
            f"the API's RSS after: {rss:.0f} MB (its first export, 1,000 runs, grew it {first:.1f} MB); "
            "peak sampled every 5 ms from /proc"
        )
        self.figures.append(f)
