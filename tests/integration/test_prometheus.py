"""A real Prometheus (Debian's package; bin/dev extracts the binary into .venv/bin) scrapes a real
worker process and the API every second while 200 runs go through, a third of them retrying a 503
first: ``increase()`` over the window, asked from Prometheus's HTTP API at the last scrape, equals
what the runs' streams say (with children created on first use it showed 62
of 185 completed runs and 10 of 90 retries). Skipped when no prometheus binary is at hand;
tests/unit/test_metrics_exposition.py checks the exposition this relies on without one."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis

from tests.integration.api_support import A, api, run_body, settings
from tests.integration.helpers import stream
from tests.support.procs import workers
from tests.support.redis_server import free_port
from tests.support.schema import K, stored

PROMETHEUS = shutil.which("prometheus") or shutil.which("prometheus", path=str(Path(sys.executable).parent))
pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(PROMETHEUS is None, reason="no prometheus binary (bin/dev test extracts one)"),
]
RUNS = 200


class Prometheus:
    def __init__(self, tmp: Path, targets: list[str]) -> None:
        self.port = free_port()
        cfg = tmp / "prometheus.yml"
        cfg.write_text(
            "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
            "scrape_configs:\n"
            f"  - job_name: agentmill\n    static_configs: [{{targets: {targets!r}}}]\n"
        )
        assert PROMETHEUS is not None
        self.proc = subprocess.Popen(
            [PROMETHEUS, f"--config.file={cfg}", f"--storage.tsdb.path={tmp / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        self.http = httpx.AsyncClient(base_url=f"http://127.0.0.1:{self.port}")

    async def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        params: dict[str, Any] = {"query": expr} | ({"time": at} if at is not None else {})
        body = (await self.http.get("/api/v1/query", params=params)).json()
        assert body["status"] == "success", body
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    async def scalar(self, expr: str, at: float) -> float:
        result = await self.query(expr, at)
        assert len(result) == 1, (expr, result)
        return float(result[0]["value"][1])

    async def wait_scraped(self, instance: str, samples: int) -> float:
        """Until ``instance`` has been scraped ``samples`` times in a row, up; its last scrape's time."""
        for _ in range(300):
            try:
                got = await self.query(f'sum_over_time(up{{instance="{instance}"}}[5m])')
                last = await self.query(f'timestamp(up{{instance="{instance}"}})')
                if got and int(got[0]["value"][1]) >= samples and last:
                    return float(last[0]["value"][1])
            except (httpx.HTTPError, ValueError):  # not up yet, or starting (a 503 that is not JSON)
                pass
            await asyncio.sleep(0.1)
        raise AssertionError(f"prometheus did not scrape {instance}")

    async def close(self) -> None:
        await self.http.aclose()
        self.proc.terminate()
        await asyncio.to_thread(self.proc.wait, 10)


async def test_increase_counts_every_completed_run_and_every_retry(
    redis_url: str, redis: Redis, tmp_path: Path
) -> None:
    wport = free_port()
    worker_at = f"127.0.0.1:{wport}"
    # The runs end together, 1.5 s after they start: a burst between two scrapes, as in production
    # when a new series' first sample already holds most of its count.
    ok = {"text": "ok", "delayMs": 1500}
    flaky = [{"error": {"status": 503, "retryAfterMs": 10}}, ok]
    body = {"runs": [run_body(flaky if i % 3 == 0 else [ok]) for i in range(RUNS)]}
    env = {"AGENTMILL_WORKER_METRICS_PORT": str(wport)}
    s = settings(redis_url)
    async with api(s) as url, httpx.AsyncClient(base_url=url, headers=A) as c:
        api_at = url.removeprefix("http://")
        prom = Prometheus(tmp_path, [worker_at, api_at])
        try:
            with workers(redis_url, 1, env=env):
                for at in (worker_at, api_at):  # a few scrapes before the first run
                    await prom.wait_scraped(at, 3)
                answer = (await c.post("/v1/runs/batch", json=body)).json()
                ids = [stored(s, "tenant-a", r["runId"]) for r in answer["results"]]  # their keys
                for _ in range(600):
                    statuses = [await redis.hget(K.run(rid), "status") for rid in ids]
                    if all(st in (b"completed", b"failed") for st in statuses):
                        break
                    await asyncio.sleep(0.1)
                await asyncio.sleep(2.5)  # the last increments scraped
                worker_t = await prom.wait_scraped(worker_at, 5)
                api_t = await prom.wait_scraped(api_at, 5)
            completed = retries = 0
            for rid in ids:
                statuses = [e.payload.get("status") for e in await stream(redis, rid) if e.kind == "status"]
                completed += statuses.count("completed")
                retries += statuses.count("retrying")
            assert completed == RUNS and retries == len(range(0, RUNS, 3))
            # At a series' last scrape, over a window reaching back before its first sample (a 0:
            # the child exists from start-up), increase() is the exact difference, not extrapolated.
            finished = 'sum(increase(agentmill_runs_finished_total{status="completed"}[5m]))'
            assert await prom.scalar(finished, worker_t) == completed
            assert await prom.scalar("sum(increase(agentmill_model_retries_total[5m]))", worker_t) == retries
            accepted = 'sum(increase(agentmill_api_submissions_total{outcome="accepted"}[5m]))'
            assert await prom.scalar(accepted, api_t) == RUNS
        finally:
            await prom.close()
