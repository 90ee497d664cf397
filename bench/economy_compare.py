"""Economy against standard on the same workload (``python -m bench.economy_compare [delay_s] [runs]``):
runs of 3 model calls and 2 tool calls on 2 worker processes, the model the local batch server
(tests/support/batch_server.py; its batch delay ``delay_s``, 1 s by default; its chat completions for
the standard lane). Prints per lane: cost per run (the profile's prices; economy at the batch price),
p50/p90 completion time (submission to last event), Redis commands per model call (INFO
commandstats over the whole pool, the batchers' polls included)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
from redis.asyncio import Redis

os.environ["AGENTMILL_DEV_PROFILES"] = "true"  # the test tool echo

from shared.profiles import load_profiles
from tests.integration.helpers import producer_for, stream, wait_all
from tests.support.batch_server import BatchServer, tool_rounds_backend
from tests.support.procs import WorkerProc
from tests.support.redis_server import free_port


async def commands(r: Redis) -> int:
    info = await r.info("commandstats")
    return sum(int(v["calls"]) for v in info.values())


async def lane_figures(r: Redis, p: Any, lane: str, n: int) -> dict[str, Any]:
    await r.config_resetstat()
    t0 = time.monotonic()
    ids = [
        (
            await p.submit(
                {"agent": "eco", "lane": lane, "inputMessages": [{"role": "user", "content": f"t{i}"}]}
            )
        ).run_id
        for i in range(n)
    ]
    recs = await wait_all(p, ids, 600)
    calls = await commands(r)
    lat = sorted([((await stream(r, rid))[-1].ts - rec.created_at_ms) / 1000 for rid, rec in recs.items()])
    costs = [rec.result.usage.cost_usd for rec in recs.values()]
    return {
        "runs": n,
        "statuses": sorted({rec.status.value for rec in recs.values()}),
        "cost_per_run_usd": round(sum(costs) / n, 9),
        "p50_s": round(lat[len(lat) // 2], 2),
        "p90_s": round(lat[int(len(lat) * 0.9)], 2),
        "redis_commands_per_model_call": round(calls / (3 * n), 1),
        "wall_s": round(time.monotonic() - t0, 2),
    }


async def main(delay_s: float, n: int, url: str, d: str) -> None:
    r = Redis.from_url(url)
    try:
        await asyncio.sleep(0.5)
        async with BatchServer(
            tool_rounds_backend("echo", rounds=2, arguments={"text": "x"}), delay_s=delay_s
        ) as server:
            path = Path(d) / "profiles.json"
            provider = {"kind": "openai", "baseUrl": server.base_url, "model": "gpt-4o-mini",
                        "pricing": {"inputPerMTok": 0.15, "outputPerMTok": 0.6}}  # fmt: skip
            path.write_bytes(orjson.dumps({"profiles": [
                {"name": "eco", "provider": provider, "tools": ["echo"], "economy": {"enabled": True}}]}))  # fmt: skip
            env = {"AGENTMILL_PROFILES": str(path), "AGENTMILL_ECONOMY_BATCH_REQUESTS": "100",
                   "AGENTMILL_ECONOMY_BATCH_AGE_S": "0.5", "AGENTMILL_ECONOMY_POLL_MIN_S": "0.25",
                   "AGENTMILL_ECONOMY_POLL_MAX_S": "1"}  # fmt: skip
            workers = [WorkerProc(url, env=env).start() for _ in range(2)]
            try:
                p = producer_for(r, url)
                p.profiles = load_profiles(str(path))
                out = {lane: await lane_figures(r, p, lane, n) for lane in ("standard", "economy")}
            finally:
                for w in workers:
                    w.stop()
        print(orjson.dumps({"batch_delay_s": delay_s, **out}, option=orjson.OPT_INDENT_2).decode())
    finally:
        await r.aclose()


if __name__ == "__main__":
    port, d = free_port(), tempfile.mkdtemp()
    redis = subprocess.Popen(
        ["redis-server", "--port", str(port), "--save", "", "--appendonly", "no", "--dir", d],
        stdout=subprocess.DEVNULL,
    )
    try:
        delay, runs = (
            float(sys.argv[1]) if len(sys.argv) > 1 else 1.0,
            int(sys.argv[2]) if len(sys.argv) > 2 else 200,
        )
        asyncio.run(main(delay, runs, f"redis://127.0.0.1:{port}/0", d))
    finally:
        redis.terminate()
