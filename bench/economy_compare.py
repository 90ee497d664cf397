"""Economy against standard on the same workload, alone (``python -m bench.economy_compare
[delay_s] [runs]``); ``bin/dev bench --only economy`` measures the same as figure 14
(bench/figures_economy.py, where the workload is described). Prints both lanes' figures as JSON."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import orjson
from redis.asyncio import Redis

os.environ["AGENTMILL_DEV_PROFILES"] = "true"  # the test tool echo

from bench.figures_economy import compare
from tests.support.procs import WorkerProc
from tests.support.redis_server import free_port


async def main(delay_s: float, n: int, url: str, d: str) -> None:
    r = Redis.from_url(url)

    def spawn(env: dict[str, str]) -> Any:
        return WorkerProc(url, env=env).start().stop

    try:
        await asyncio.sleep(0.5)
        out = await compare(r, url, Path(d), n, delay_s, spawn)
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
