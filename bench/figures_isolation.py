"""Figure 9: one tenant's worst input against another tenant's latency, side by side.

An API and a worker in their own processes, with the dev profiles off (production's profiles) and
the default quotas. Tenant B submits `6*7` to the `default` profile one run at a time and we time
submit (the POST's answer) and first event (its `status running` in the stream, read with XREAD).
Baseline: B alone. Then the same while tenant A, from another process (bench/attack.py), sends
calculator bombs, 32 parallel worst-case listings over an index of its own runs, and 20,000
requests with made-up methods. The figure is B's p99 under attack minus B's p99 alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

import httpx
from redis.asyncio import Redis

from bench.figure import Figure
from bench.plumbing import ROOT, Plumbing
from bench.probes import pct
from shared.settings import Settings
from tests.support.redis_server import free_port
from tests.support.schema import K, stored

TOKENS = "tok-a=tenant-a,tok-b=tenant-b"
ID_SECRET = "bench-id-secret"
QUOTA_ENV = (
    "AGENTMILL_TENANT_MAX_RUNNING",
    "AGENTMILL_TENANT_MAX_ACTIVE",
    "AGENTMILL_TENANT_SUBMITS_PER_SECOND",
)


class IsolationFigures(Plumbing):
    scoping = Settings(id_secret=ID_SECRET)  # the ids the API keeps tenants' runs under

    def _prod_env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in self.env(**extra).items() if k not in QUOTA_ENV}  # default quotas
        env["AGENTMILL_DEV_PROFILES"] = "false"
        env["AGENTMILL_ID_SECRET"] = ID_SECRET  # the API names tenants: it refuses to start without one
        return env

    def _spawn_prod(self, argv: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [sys.executable, *argv], cwd=ROOT, env=env or self._prod_env(),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip

    async def _victim(
        self, c: httpx.AsyncClient, r: Redis, n: int, until: asyncio.Task[Any] | None = None
    ) -> tuple[list[float], list[float]]:
        """``n`` runs one after another; with ``until``, more until that task (the attack) is over."""
        body = {"inputMessages": [{"role": "user", "content": "6*7"}]}
        submit, first = [], []
        while len(submit) < n or (until is not None and not until.done()):
            t0 = time.perf_counter()
            resp = await c.post("/v1/runs", json=body, headers={"Authorization": "Bearer tok-b"})
            t1 = time.perf_counter()
            run_id = stored(self.scoping, "tenant-b", resp.json()["runId"])  # the key it is kept under
            got = await r.xread({K.events(run_id): "0-0"}, count=1, block=10_000)
            t2 = time.perf_counter()
            submit.append((t1 - t0) * 1000)
            first.append((t2 - t0) * 1000 if got else 10_000.0)
            if first.count(10_000.0) >= 3:  # a pool that stopped starting runs: enough said
                break
            await asyncio.sleep(0.05)
        return submit, first

    async def fig_isolation(self, r: Redis) -> None:
        await self.flush(r)
        port = free_port()
        env = self._prod_env(AGENTMILL_API_PORT=str(port), AGENTMILL_API_TOKENS=TOKENS)
        procs = [self._spawn_prod(["-m", "worker"]), self._spawn_prod(["-m", "producer.cli", "api"], env)]
        self.procs += procs
        url = f"http://127.0.0.1:{port}"
        n = self.args.isolation_samples
        try:
            async with httpx.AsyncClient(base_url=url, timeout=60) as c:
                for _ in range(600):
                    with contextlib.suppress(httpx.HTTPError):
                        if (await c.get("/readyz")).status_code == 200:
                            break
                    await asyncio.sleep(0.05)
                await self.wait_started(r)
                # Tenant A's index to list: finished runs of its own, a batch at a time.
                a = {"Authorization": "Bearer tok-a"}
                for _ in range(self.args.isolation_index // 500):
                    runs = [{"inputMessages": [{"role": "user", "content": "1+1"}]}] * 500
                    resp = await c.post("/v1/runs/batch", json={"runs": runs}, headers=a)
                    while resp.status_code == 429:
                        await asyncio.sleep(float(resp.headers.get("Retry-After", "1")))
                        resp = await c.post("/v1/runs/batch", json={"runs": runs}, headers=a)
                deadline = time.monotonic() + 300
                while not await self.runs_done(r) and time.monotonic() < deadline:
                    await asyncio.sleep(0.2)
                base_submit, base_first = await self._victim(c, r, n)
                attack = await asyncio.create_subprocess_exec(
                    sys.executable, "-m", "bench.attack", url, "tok-a", "180",
                    cwd=ROOT, stdout=asyncio.subprocess.PIPE, env=os.environ.copy(),
                )  # fmt: skip
                over = asyncio.create_task(attack.communicate())
                await asyncio.sleep(2.0)  # the attack under way
                hit_submit, hit_first = await self._victim(c, r, n, until=over)
                out, _ = await over
                healthy = (await c.get("/readyz")).status_code
        finally:
            for p in procs:
                self.stop(p)
        sent = json.loads(out or b"{}")
        for name, ours, base in (
            ("submit → 202", hit_submit, base_submit),
            ("submit → first event", hit_first, base_first),
        ):
            f = Figure(
                f"9. another tenant's {name} under one tenant's worst input (p99)",
                "ms",
                base_name="the same, alone",
                target="p99 + 100 ms at most",
            )
            f.ours, f.base = [pct(ours, 99)], [pct(base, 99)]
            f.higher_is_better = False
            f.note = (
                f"p99 {pct(ours, 99):.0f} ms vs {pct(base, 99):.0f} ms alone (+{pct(ours, 99) - pct(base, 99):.0f} ms), "
                f"p50 {statistics.median(ours):.0f} vs {statistics.median(base):.0f} ms, n={len(ours)}; attacker sent "
                f"{sent.get('bombs')} bombs, {sent.get('listings')} listings, {sent.get('methods')} bogus methods; "
                f"/readyz after: {healthy}"
            )
            self.figures.append(f)
