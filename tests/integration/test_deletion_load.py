"""A deletion by metadata of 10,000 runs, run by real workers, while another tenant submits: that
tenant's submit latency (p99) stays within 100 ms of its baseline, and the deletion completes with
progress. Slow (about a minute): ``pytest -m slow tests/integration/test_deletion_load.py``."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
import pytest
from redis.asyncio import Redis

from tests.integration.api_support import A, B, api, settings
from tests.support.procs import workers

pytestmark = [pytest.mark.integration, pytest.mark.slow]

N = 10_000
LATER_MS = 4_000_000_000_000  # runAt far ahead: the runs wait, scheduled, for their deletion


def p99(xs: list[float]) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * 0.99))]


async def submit_latencies(c: httpx.AsyncClient, until: asyncio.Event | None, n: int) -> list[float]:
    out: list[float] = []
    i = 0
    while (until is None and i < n) or (until is not None and not until.is_set()):
        t = time.perf_counter()
        r = await c.post("/v1/runs", headers=B, json={"inputMessages": [{"role": "user", "content": "hi"}],
                                                       "runAt": LATER_MS})  # fmt: skip
        out.append((time.perf_counter() - t) * 1000)
        assert r.status_code == 202, r.text
        i += 1
        await asyncio.sleep(0.01)
    return out


@pytest.mark.timeout(600)
async def test_deleting_10000_runs_leaves_another_tenants_submits_within_100ms_of_baseline(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    s = settings(redis_url, max_queue_depth=1_000_000)
    with workers(redis_url, 2, log_dir=tmp_path):
        async with api(s) as base, httpx.AsyncClient(base_url=base, headers=A, timeout=60) as c:
            for start in range(0, N, 1000):
                runs = [{"inputMessages": [{"role": "user", "content": f"r{i}"}], "runAt": LATER_MS,
                         "metadata": {"endUser": "u-big"}} for i in range(start, start + 1000)]  # fmt: skip
                body = {"runs": runs, "batchId": "big", "offset": start, "more": start + 1000 < N}
                r = await c.post("/v1/runs/batch", json=body)
                while r.status_code == 429:
                    await asyncio.sleep(float(r.headers.get("Retry-After", "1")))
                    r = await c.post("/v1/runs/batch", json=body)
                assert r.status_code == 200, r.text
            base_ms = await submit_latencies(c, None, 300)
            r = await c.post("/v1/deletions", json={"metadata": {"endUser": "u-big"}})
            did = r.json()["deletionId"]
            done = asyncio.Event()
            seen: list[int] = []
            started = time.monotonic()

            async def follow() -> None:
                while True:
                    v = (await c.get(f"/v1/deletions/{did}")).json()
                    seen.append(v["deleted"])
                    if v["state"] == "done":
                        done.set()
                        return
                    await asyncio.sleep(0.5)

            during_task = asyncio.create_task(submit_latencies(c, done, 0))
            await asyncio.wait_for(follow(), 500)
            took = time.monotonic() - started
            during_ms = await during_task
            v = (await c.get(f"/v1/deletions/{did}")).json()
            print(f"\n10,000 runs deleted in {took:.1f} s; other tenant's submit p99: baseline {p99(base_ms):.1f} ms "
                  f"({len(base_ms)} submits), during {p99(during_ms):.1f} ms ({len(during_ms)} submits); "
                  f"progress seen: {len(set(seen))} values")  # fmt: skip
            assert v["deleted"] == N and v["matched"] == N, v
            assert len(set(seen)) >= 3  # progress, part way
            assert p99(during_ms) <= p99(base_ms) + 100
