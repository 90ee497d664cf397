"""The API's CPU per request of figure 9's first attack's kinds (and the other tenant's submit): an
API process of its own (`agentmill api`, no worker), each kind sent N times from this process, the
API's CPU (user + system, /proc) before and after divided by N. Alternate two trees' runs to compare.

    bin/dev python -m bench.api_request_cpu [--n 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import string
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx

from bench.figures_isolation import ID_SECRET, TOKENS
from bench.plumbing import api_env, wait_ready
from tests.support.redis_server import RedisServer, free_port


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def main(n: int) -> None:
    server = RedisServer()
    server.start()
    port = free_port()
    env = api_env(server.url, port, AGENTMILL_API_TOKENS=TOKENS, AGENTMILL_ID_SECRET=ID_SECRET)
    api = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "app.cli", "api", env=env, stderr=subprocess.DEVNULL
    )
    url = f"http://127.0.0.1:{port}"
    a = {"Authorization": "Bearer tok-a"}
    try:
        await wait_ready(url)
        async with httpx.AsyncClient(base_url=url, timeout=60) as c:
            listing = {"createdBefore": 1, "limit": 1}
            kinds: dict[str, Callable[[int], Awaitable[httpx.Response]]] = {
                "bogus method (no token)": lambda i: c.request(
                    "".join(random.choices(string.ascii_uppercase, k=(7, 40, 3000)[i % 3])), "/v1/runs"
                ),
                "listing (tenant A)": lambda i: c.get("/v1/runs", params=listing, headers=a),
                "GET /v1/runs/{id} (unknown)": lambda i: c.get("/v1/runs/nope", headers=a),
            }
            for name, send in kinds.items():
                for i in range(50):  # warm
                    await send(i)
                t0, w0 = cpu_s(api.pid), time.monotonic()
                for i in range(n):
                    await send(i)
                used = cpu_s(api.pid) - t0
                print(
                    f"{name:<30} {used / n * 1e6:8.0f} µs of API CPU a request ({n} in {time.monotonic() - w0:.1f} s)"
                )
    finally:
        api.terminate()
        await api.wait()
        server.close()


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=2000)
    asyncio.run(main(ap.parse_args().n))
