"""CPU per run of one worker process and of redis-server, under figure 1's load (one-step runs) and
figure 4's (1,000 runs in flight, the model answering after 1 s), for comparing two checkouts side
by side on a shared machine: CPU time holds up far better than runs/s when other processes take
the cores (it still drifts by 10-15 % with the load, so alternate the trees and compare pairs).

It measures the tree it is run from (its ``bench`` package, from the working directory, with that
tree's venv), so one copy of this file serves any checkout whose bench has ``Bench`` with
``spawn``, ``wait_started``, ``producer``, ``script_run`` and ``runs_done`` (baf578c's does):

    cd /work/wt-OTHER && .venv/bin/python /path/to/bench/cpu_per_run.py OUT.json

prints and writes {"fig1"|"fig4": {worker_ms_per_run, redis_ms_per_run, runs_s, load}}. The
worker's CPU is read from /proc after its start-up (Linux only).

With the archive: ``--archive`` starts a private PostgreSQL (tests/support, this tree's)
and runs the worker with ``AGENTMILL_ARCHIVE_URL``, its archiver task in the worker's process;
``--archive apart`` turns that task off and runs ``agentmill archiver`` as a process of its own,
whose CPU is reported beside (``archiver_ms_per_run``); both drain the archive before the figure
is taken, so it includes the archiving of its runs. ``--archive index`` measures the runs' own path
with the archive on and nothing archiving meanwhile (the ending scripts add each run to the
archive's index; no archiver runs): the hot path's share of the archive.

``--kind openai`` runs figure 1 (only) on an ``openai``-kind profile (gpt-4o-mini, priced by the
profile, so both trees cost each call) against the tree's tests/support/fake_openai.py, served in this
process and answering "hi" in one chunk at once: the provider's own path (request body, stream
parsing, usage and cost) on top of the scripted kind's. Its CPU is not counted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from typing import Any

sys.path.insert(0, os.getcwd())  # the tree measured is the one it runs in

from redis.asyncio import Redis

from bench.__main__ import Bench

TICK = os.sysconf("SC_CLK_TCK")


# bench/probes.py has these two as well; this script keeps its own, since it runs against older
# checkouts' bench packages (the docstring), which do not have them.
def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a live process."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


async def redis_cpu_s(r: Redis) -> float:
    i = await r.info("cpu")
    return float(i["used_cpu_user"]) + float(i["used_cpu_sys"])


async def archived_all(r: Redis) -> bool:
    """No run left in the archive's index (one partition, the bench's default): all archived."""
    from shared import keys  # this tree's (since the archive)

    return not await r.zcard(keys.Partition(0, 1).archive)


async def one(
    b: Any,
    r: Redis,
    n: int,
    script: list[dict[str, Any]],
    env: dict[str, str],
    apart: bool,
    drain: bool,
    agent: str = "scripted",
) -> dict[str, float]:
    """n runs of ``script`` through one fresh worker process, counted from after its start-up."""
    await b.flush(r)
    p = b.spawn(["-m", "app.worker" if os.path.isdir("app") else "worker"], **env)  # older trees: worker
    a = b.spawn(["-m", "app.cli", "archiver"], **env) if apart else None
    await b.wait_started(r, 90.0)  # a loaded machine starts a worker slowly
    await asyncio.sleep(1.5)  # imports and first polls over
    c0, rc0, t0 = cpu_s(p.pid), await redis_cpu_s(r), time.perf_counter()
    a0 = cpu_s(a.pid) if a else 0.0
    run = (
        b.script_run(script, agent)
        if script
        else {"agent": agent, "inputMessages": [{"role": "user", "content": "bench"}]}
    )
    await b.producer(r).submit_many([run] * n)
    while not await b.runs_done(r):
        await asyncio.sleep(0.01)
    t1 = time.perf_counter()
    while drain and not await archived_all(r):  # the archiving these runs made, counted with them
        await asyncio.sleep(0.05)
    c1, rc1, a1 = cpu_s(p.pid), await redis_cpu_s(r), (cpu_s(a.pid) if a else 0.0)
    b.stop(p)
    if a:
        b.stop(a)
    return {
        "worker_ms_per_run": (c1 - c0) * 1000 / n,
        "redis_ms_per_run": (rc1 - rc0) * 1000 / n,
        "archiver_ms_per_run": (a1 - a0) * 1000 / n,
        "runs_s": n / (t1 - t0),
        "load": os.getloadavg()[0],
    }


FIG4 = [{"text": "ok", "delayMs": 1000}]  # figure 4: the model answers after 1 s
# --streamed: a reply of 100 words streamed over 2 s, as models do: its deltas flushed while it
# streams (worker/core/delta_pace.py) are most of such a run's cost
FIG4_STREAMED = [{"text": "word " * 100, "delayMs": 2000}]


async def openai_fig1(
    b: Any, r: Redis, n: int, env: dict[str, str], apart: bool, drain: bool
) -> dict[str, float]:
    """Figure 1 on an ``openai``-kind profile against the tree's fake OpenAI server."""
    import tempfile

    from tests.support.fake_openai import FakeOpenAI, Reply  # the tree's

    replies = [Reply(text="hi", chunk_delay_s=0.0, pieces=1) for _ in range(n + 100)]
    async with FakeOpenAI(replies) as fake:
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "profiles.json")
            prov = {"kind": "openai", "baseUrl": fake.base_url, "model": "gpt-4o-mini",
                    "pricing": {"inputPerMTok": 0.15, "outputPerMTok": 0.6}}  # fmt: skip
            with open(path, "w") as f:
                json.dump({"profiles": [{"name": "oa", "systemPrompt": "Be brief.", "provider": prov}]}, f)
            producer = b.producer
            b.producer = lambda r, **s: producer(r, profiles=path, **s)
            try:
                res = await one(b, r, n, [], {**env, "AGENTMILL_PROFILES": path}, apart, drain, agent="oa")
            finally:
                b.producer = producer
    res["model_calls"] = len(fake.requests)
    return res


async def measure(
    out: str, runs: int, inflight: int, archive: str, streamed: bool = False, kind: str = "scripted"
) -> None:
    b = Bench(argparse.Namespace(poll_delay=0.05))
    b.server.start()
    r = Redis.from_url(b.server.url)
    pg: Any = None
    env: dict[str, str] = {}
    if archive:
        from tests.support.postgres_server import PostgresServer  # this tree's (since the archive)

        pg = PostgresServer()
        pg.start()
        env = {"AGENTMILL_ARCHIVE_URL": pg.url}
        if archive in ("apart", "index"):
            env["AGENTMILL_WORKER_ARCHIVER"] = "false"
    try:
        apart, drain = archive == "apart", archive in ("worker", "apart")
        if kind == "openai":
            res = {"fig1_openai": await openai_fig1(b, r, runs, env, apart, drain)}
        else:
            res = {
                "fig1": await one(b, r, runs, [{"text": "hi"}], env, apart, drain),
                # all of figure 4's runs in flight at once, as the bench's figure 4 has them (the
                # default AGENTMILL_MAX_JOBS of 500 ran 1,000 in two waves here until 2026-11-26)
                "fig4": await one(
                    b,
                    r,
                    inflight,
                    FIG4_STREAMED if streamed else FIG4,
                    {**env, "AGENTMILL_MAX_JOBS": str(inflight + 10)},
                    apart,
                    drain,
                ),
            }
    finally:
        for p in b.procs:
            b.stop(p)
        await r.aclose()
        b.server.close()
        if pg is not None:
            pg.close()
    with open(out, "w") as f:
        json.dump(res, f)
    print(res)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--runs", type=int, default=2000, help="figure 1's one-step runs")
    ap.add_argument("--inflight", type=int, default=1000, help="figure 4's runs in flight")
    ap.add_argument(
        "--archive", nargs="?", const="worker", default="", choices=["worker", "apart", "index"],
        help="archive to a private PostgreSQL: the worker's archiver task, 'apart' (its own process), "
        "or 'index' (runs indexed for the archive, none archived meanwhile)",
    )  # fmt: skip
    ap.add_argument("--streamed", action="store_true", help="figure 4's reply: 100 words streamed over 2 s")
    ap.add_argument("--kind", choices=["scripted", "openai"], default="scripted",
                    help="openai: figure 1 only, on an openai-kind profile against the fake server")  # fmt: skip
    a = ap.parse_args()
    asyncio.run(measure(a.out, a.runs, a.inflight, a.archive, a.streamed, a.kind))
