"""CPU per submission of figure 9's victim, and per attacker request, for comparing two checkouts
side by side on a busy machine (CPU time, not latency: the machine's load moves latency, not this).

The same processes as figure 9 (bench/figures_isolation.py): an API with two tenants' tokens and the
default quotas, and a worker, each in its own process. Tenant B submits ``6*7`` to the ``default``
profile N times, one after another, each waited for until its first event; we read the CPU the API,
the worker and redis-server spent meanwhile, per run. Then, with ``--attack``, the schema attack's
two bodies (bench/attack_kinds.py) N times each from tenant A: the API's CPU per request, and the
longest time B's submit waited on the API while they were sent.

It measures the tree it is run from (its ``bench`` package and venv; this file may come from
another tree), as bench/cpu_per_run.py does:

    cd /work/wt-OTHER && bin/dev python /path/to/bench/cpu_per_submit.py OUT.json

``--dev-profiles`` loads the test-only profiles as figure 9 does since its attacks need them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.getcwd())  # the tree measured is the one it runs in

import httpx
from redis.asyncio import Redis

from bench.__main__ import Bench
from shared.settings import Settings
from tests.support.schema import K, stored

try:
    from tests.support.redis_server import free_port
except ImportError:  # older trees keep it in shared/
    from shared.redis_server import free_port  # type: ignore[no-redef,import-not-found]

TICK = os.sysconf("SC_CLK_TCK")
SECRET = "bench-id-secret"
QUOTAS = (
    "AGENTMILL_TENANT_MAX_RUNNING",
    "AGENTMILL_TENANT_MAX_ACTIVE",
    "AGENTMILL_TENANT_SUBMITS_PER_SECOND",
)
BODY = {"inputMessages": [{"role": "user", "content": "6*7"}]}


def cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


async def redis_cpu_s(r: Redis) -> float:
    i = await r.info("cpu")
    return float(i["used_cpu_user"]) + float(i["used_cpu_sys"])


async def victim(c: httpx.AsyncClient, r: Redis, n: int) -> tuple[int, list[float]]:
    scoping = Settings(id_secret=SECRET)
    refused = 0
    submits: list[float] = []
    for _ in range(n):
        while True:
            t0 = time.perf_counter()
            resp = await c.post("/v1/runs", json=BODY, headers={"Authorization": "Bearer tok-b"})
            submits.append(time.perf_counter() - t0)
            if resp.status_code != 429:
                break
            refused += 1
            await asyncio.sleep(0.2)
        key = stored(scoping, "tenant-b", resp.json()["runId"])
        await r.xread({K.events(key): "0-0"}, count=1, block=10_000)
    return refused, submits


async def worst_listings(
    c: httpx.AsyncClient, r: Redis, b: Any, api: int, worker: int, n: int
) -> dict[str, Any]:
    """Figure 9's first attack, one request at a time: worst-case listings over 5,000 runs of
    tenant A's own, and requests with made-up methods; the API's and Redis's CPU per request."""
    a_hdr = {"Authorization": "Bearer tok-a"}
    for _ in range(10):
        runs = [{"inputMessages": [{"role": "user", "content": "1+1"}]}] * 500
        resp = await c.post("/v1/runs/batch", json={"runs": runs}, headers=a_hdr)
        while resp.status_code == 429:
            await asyncio.sleep(float(resp.headers.get("Retry-After", "1")))
            resp = await c.post("/v1/runs/batch", json={"runs": runs}, headers=a_hdr)
    while not await b.runs_done(r):
        await asyncio.sleep(0.2)
    cursor = (await c.get("/v1/runs", params={"limit": 1}, headers=a_hdr)).json().get("next")
    params = {"createdBefore": 1, "limit": 1, **({"cursor": cursor} if cursor else {})}
    out: dict[str, Any] = {}
    a0, r0 = cpu_s(api), await redis_cpu_s(r)
    for _ in range(n):
        await c.get("/v1/runs", params=params, headers=a_hdr)
    a1, r1 = cpu_s(api), await redis_cpu_s(r)
    out.update(api_ms_per_listing=(a1 - a0) * 1000 / n, redis_ms_per_listing=(r1 - r0) * 1000 / n)
    a0 = cpu_s(api)
    for i in range(n):
        await c.request(("X" * 7, "Y" * 40, "Z" * 3000)[i % 3], "/v1/runs")
    out["api_ms_per_bogus_method"] = (cpu_s(api) - a0) * 1000 / n
    a0, w0 = cpu_s(api), cpu_s(worker)
    bomb = {"inputMessages": [{"role": "user", "content": "(((99**64)**64)**64)**64"}]}
    for _ in range(n // 10):
        await c.post("/v1/runs", json=bomb, headers=a_hdr)
    while not await b.runs_done(r):
        await asyncio.sleep(0.05)
    out["api_ms_per_bomb_submit"] = (cpu_s(api) - a0) * 1000 / (n // 10)
    out["worker_ms_per_bomb_run"] = (cpu_s(worker) - w0) * 1000 / (n // 10)
    return out


def _wide(tag: str) -> dict[str, Any]:
    """A run whose responseFormat schema is within every bound (27 KB) and its own (``tag``): the
    costliest schema to check that a tenant may send (tests/support/schemas.py's ``wide``)."""
    props = {f"p{i}": {"type": "string", "minLength": 1} for i in range(700)}
    schema = {"title": f"wide {tag}", "type": "object", "properties": props}
    return {"agent": "scripted", "inputMessages": [{"role": "user", "content": "go"}],
            "runtimeHints": {"script": [{"text": "x"}]},
            "responseFormat": {"type": "json_schema", "jsonSchema": {"name": "out", "schema": schema}}}  # fmt: skip


async def schema_attack(c: httpx.AsyncClient, r: Redis, api: int, worker: int, n: int) -> dict[str, Any]:
    """The schema attack's bodies (bench/attack_kinds.py: ReDoS and doubling ``$ref``s, the same each
    time) and a schema at the size bound, new each time: the API's CPU per request (sequential);
    then B's submit latency while four attackers send the new ones without pause (a busy machine
    moves the figures; the longest submit is what the loop's stall adds)."""
    from bench.attack_kinds import DOUBLING_RUN, REDOS_RUN

    a_hdr = {"Authorization": "Bearer tok-a"}
    out: dict[str, Any] = {}
    bodies: tuple[tuple[str, Callable[[int], dict[str, Any]]], ...] = (
        ("redos", lambda i: REDOS_RUN), ("doubling", lambda i: DOUBLING_RUN),
        ("wide", lambda i: _wide(f"{time.time_ns()} {i}")),
    )  # fmt: skip
    for name, body in bodies:
        a0 = cpu_s(api)
        codes: dict[int, int] = {}
        for i in range(n):
            resp = await c.post("/v1/runs", json=body(i), headers=a_hdr)
            codes[resp.status_code] = codes.get(resp.status_code, 0) + 1
            if resp.status_code == 429:
                await asyncio.sleep(1.0)
        out[f"api_ms_per_{name}"] = (cpu_s(api) - a0) * 1000 / n
        out[f"codes_{name}"] = codes
    until = time.monotonic() + 10.0

    async def attacker(k: int) -> None:
        i = 0
        while time.monotonic() < until:
            resp = await c.post("/v1/runs", json=_wide(f"{time.time_ns()} {k} {i}"), headers=a_hdr)
            if resp.status_code == 429:
                await asyncio.sleep(0.2)
            i += 1

    async def victim_submits() -> list[float]:
        took: list[float] = []
        await asyncio.sleep(0.5)
        while time.monotonic() < until:
            t0 = time.perf_counter()
            await c.post("/v1/runs", json=BODY, headers={"Authorization": "Bearer tok-b"})
            took.append((time.perf_counter() - t0) * 1000)
            await asyncio.sleep(0.05)
        return took

    took = (await asyncio.gather(*(attacker(k) for k in range(4)), victim_submits()))[-1]
    assert took is not None
    took.sort()
    out.update(victim_n=len(took), victim_p50_ms=took[len(took) // 2], victim_p99_ms=took[int(len(took) * 0.99)],
               victim_max_ms=took[-1])  # fmt: skip
    return out


async def measure(out: str, n: int, dev_profiles: bool, attack: int, listings: int = 0) -> None:
    os.environ["AGENTMILL_DEV_PROFILES"] = "true" if dev_profiles else "false"
    b = Bench(argparse.Namespace(poll_delay=0.05))
    b.server.start()
    r = Redis.from_url(b.server.url)
    port = free_port()
    extra = {"AGENTMILL_ID_SECRET": SECRET, "AGENTMILL_DEV_PROFILES": os.environ["AGENTMILL_DEV_PROFILES"]}
    for q in QUOTAS:  # the default quotas, as figure 9
        os.environ.pop(q, None)
    env = {k: v for k, v in b.env(**extra).items() if k not in QUOTAS}
    res: dict[str, Any] = {"tree": os.getcwd(), "n": n, "dev_profiles": dev_profiles}
    import subprocess

    def spawn(argv: list[str], **more: str) -> subprocess.Popen[bytes]:
        p = subprocess.Popen([sys.executable, *argv], cwd=os.getcwd(), env={**env, **more},
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        b.procs.append(p)
        return p

    try:
        worker = spawn(["-m", "app.worker"])
        api = spawn(["-m", "app.cli", "api"], AGENTMILL_API_PORT=str(port),
                    AGENTMILL_API_TOKENS="tok-a=tenant-a,tok-b=tenant-b")  # fmt: skip
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=60) as c:
            for _ in range(600):
                with contextlib.suppress(httpx.HTTPError):
                    if (await c.get("/readyz")).status_code == 200:
                        break
                await asyncio.sleep(0.05)
            await b.wait_started(r)
            await victim(c, r, 20)  # imports, first compiles
            while not await b.runs_done(r):
                await asyncio.sleep(0.05)
            a0, w0 = cpu_s(api.pid), cpu_s(worker.pid)
            await asyncio.sleep(5.0)  # idle: what the processes spend with nothing to do
            res.update(
                api_idle_ms_per_s=(cpu_s(api.pid) - a0) * 200,
                worker_idle_ms_per_s=(cpu_s(worker.pid) - w0) * 200,
            )
            a0, w0, r0 = cpu_s(api.pid), cpu_s(worker.pid), await redis_cpu_s(r)
            refused, _ = await victim(c, r, n)
            while not await b.runs_done(r):
                await asyncio.sleep(0.02)
            a1, w1, r1 = cpu_s(api.pid), cpu_s(worker.pid), await redis_cpu_s(r)
            res.update(
                api_ms_per_submit=(a1 - a0) * 1000 / n,
                worker_ms_per_run=(w1 - w0) * 1000 / n,
                redis_ms_per_run=(r1 - r0) * 1000 / n,
                refused_429=refused,
                load=os.getloadavg()[0],
            )
            if listings:
                res.update(await worst_listings(c, r, b, api.pid, worker.pid, listings))
            if attack:
                res.update(await schema_attack(c, r, api.pid, worker.pid, attack))
    finally:
        for p in b.procs:
            b.stop(p)
        await r.aclose()
        b.server.close()
    with open(out, "w") as f:
        json.dump(res, f)
    print(json.dumps(res))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--runs", type=int, default=300)
    ap.add_argument("--dev-profiles", action="store_true")
    ap.add_argument("--attack", type=int, default=0, help="schema-attack requests of each kind")
    ap.add_argument("--listings", type=int, default=0, help="figure 9's first attack's requests of each kind")
    a = ap.parse_args()
    asyncio.run(measure(a.out, a.runs, a.dev_profiles, a.attack, a.listings))
