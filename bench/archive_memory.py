"""The archive's figures: Redis memory per finished run without the archive, with it
within the live retention and after it; the archive's throughput (runs/s into PostgreSQL) beside the
pool's run rate; an API read from the archive (a run, its events), p50/p99.

    bin/dev python -m bench.archive_memory [--runs 2000] [--workers 2]

Starts its own redis-server and PostgreSQL (tests/support), real worker processes and the API in
this process. Runs are the scripted profile's: a tool call (echo), then an answer (8 events each).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from typing import Any

import httpx
from redis.asyncio import Redis

from shared import keys
from tests.integration.api_support import A, api, run_body, settings
from tests.support.postgres_server import PostgresServer
from tests.support.procs import workers
from tests.support.redis_server import RedisServer

PART = keys.Partition(0, 1)
LIVE_S = 60  # long enough for every run of the batch to be in Redis still when measured


def _item(i: int) -> dict[str, Any]:
    return run_body(
        [{"toolCalls": [{"name": "echo", "arguments": {"text": f"n{i}"}}]}, {"text": f"answer {i}"}]
    )


async def _used(r: Redis) -> int:
    await asyncio.sleep(0.5)
    return int((await r.info("memory"))["used_memory"])


async def _submit(c: httpx.AsyncClient, batch: str, n: int) -> list[str]:
    ids: list[str] = []
    for start in range(0, n, 1000):
        body = {"runs": [_item(i) for i in range(start, min(n, start + 1000))], "batchId": batch,
                "offset": start, "more": start + 1000 < n}  # fmt: skip
        r = await c.post("/v1/runs/batch", json=body, timeout=120)
        r.raise_for_status()
        ids += [x["runId"] for x in r.json()["results"]]
    return ids


async def _finished(c: httpx.AsyncClient, batch: str, within: float = 600) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < within:
        if (await c.get(f"/v1/batches/{batch}")).json().get("finished"):
            return time.monotonic() - t0
        await asyncio.sleep(0.1)
    raise TimeoutError(batch)


async def _until(check: Any, within: float) -> float:
    t0 = time.monotonic()
    while not await check():
        if time.monotonic() - t0 > within:
            raise TimeoutError(str(check))
        await asyncio.sleep(0.05)
    return time.monotonic() - t0


async def _runs_left(r: Redis) -> int:
    n = 0
    async for _ in r.scan_iter(match=PART.run_prefix + "*", count=1000):
        n += 1
    return n


async def main(n: int, nworkers: int) -> None:
    os.environ["AGENTMILL_DEV_PROFILES"] = "true"  # the scripted profile, in the API and the workers
    rs = RedisServer()
    rs.start()
    pg = PostgresServer()
    pg.start()
    r = Redis.from_url(rs.url)
    out: dict[str, str] = {}
    try:
        # without the archive
        async with api(settings(rs.url)) as base, httpx.AsyncClient(base_url=base, headers=A) as c:
            with workers(rs.url, nworkers):
                await asyncio.sleep(2)
                m0 = await _used(r)
                await _submit(c, "plain", n)
                took = await _finished(c, "plain")
                m1 = await _used(r)
        out["pool run rate, archive off (runs/s)"] = f"{n / took:.0f}"
        out["Redis bytes per finished run, archive off"] = f"{(m1 - m0) / n:.0f}"
        await r.flushall()
        # with the archive
        env = {"AGENTMILL_ARCHIVE_URL": pg.url, "AGENTMILL_LIVE_RETENTION_S": str(LIVE_S)}
        s = settings(rs.url, archive_url=pg.url, live_retention_s=LIVE_S)
        async with api(s) as base, httpx.AsyncClient(base_url=base, headers=A) as c:
            with workers(rs.url, nworkers, env=env):
                await asyncio.sleep(2)
                m0 = await _used(r)
                ids = await _submit(c, "arch", n)
                took = await _finished(c, "arch")
                lag = await _until(lambda: _zero(r), 600)
                m1 = await _used(r)
                out["keys within the live retention, by kind"] = await _census(r)
                out["pool run rate, archive on (runs/s)"] = f"{n / took:.0f}"
                out["archive: runs/s into PostgreSQL, keeping up with the pool"] = f"{n / (took + lag):.0f}"
                out["archive: backlog drained after the last run ended (s)"] = f"{lag:.2f}"
                out["Redis bytes per finished run, archived, within the live retention"] = (
                    f"{(m1 - m0) / n:.0f}"
                )
                await _until(lambda: _gone(r), LIVE_S + 60)
                m2 = await _used(r)
                out["keys left after the live retention, by kind"] = await _census(r)
                out["Redis bytes per finished run after the live retention"] = f"{(m2 - m0) / n:.0f}"
                lat: list[float] = []
                for rid in ids[:: max(1, n // 300)]:
                    t = time.perf_counter()
                    (await c.get(f"/v1/runs/{rid}")).raise_for_status()
                    (await c.get(f"/v1/runs/{rid}/events", params={"format": "json"})).raise_for_status()
                    lat.append((time.perf_counter() - t) * 1000)
                lat.sort()
                out["API read from the archive (run + events), p50 / p99 ms"] = (
                    f"{statistics.median(lat):.1f} / {lat[int(len(lat) * 0.99) - 1]:.1f}"
                )
        # with the archive, PostgreSQL down during the load: the hot path, then the backlog's drain
        await r.flushall()
        pg.stop()
        async with api(s) as base, httpx.AsyncClient(base_url=base, headers=A) as c:
            with workers(rs.url, nworkers, env=env):
                await asyncio.sleep(2)
                await _submit(c, "down", n)
                took = await _finished(c, "down")
                out["pool run rate, archive on, PostgreSQL down (runs/s)"] = f"{n / took:.0f}"
                pg.start()
                await _until(lambda: _below(r, n), 120)  # the archivers' backoff (up to 5 s) over
                left = int(await r.zcard(PART.archive))
                drain = await _until(lambda: _zero(r), 600)
                out[f"archive: runs/s into PostgreSQL, draining a backlog of {n}"] = f"{left / drain:.0f}"
    finally:
        await r.aclose()
        pg.close()
        rs.stop()
    print(f"archive bench: {n} runs, {nworkers} workers")
    for k, v in out.items():
        print(f"  {k:<75} {v}")


async def _census(r: Redis) -> str:
    """Keys by kind (their name up to the id), with their memory: what a finished run leaves."""
    kinds: dict[str, list[int]] = {}
    async for k in r.scan_iter(count=1000):
        name = k.decode()
        kind = ":".join(name.split(":")[:3]) if name.startswith("am:") else ":".join(name.split(":")[:2])
        got = kinds.setdefault(kind, [0, 0])
        got[0] += 1
        got[1] += int(await r.memory_usage(k) or 0)
    return ", ".join(
        f"{k} {n} ({b / 1000:.0f} KB)" for k, (n, b) in sorted(kinds.items(), key=lambda x: -x[1][1])
    )


async def _below(r: Redis, n: int) -> bool:
    return int(await r.zcard(PART.archive)) < n


async def _zero(r: Redis) -> bool:
    return int(await r.zcard(PART.archive)) == 0


async def _gone(r: Redis) -> bool:
    return await _runs_left(r) == 0


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=2000)
    ap.add_argument("--workers", type=int, default=2)
    a = ap.parse_args()
    asyncio.run(main(a.runs, a.workers))
