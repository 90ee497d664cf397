"""redis-server's instructions per step of figure 3b's load, exact where its CPU time is not: the
bench's redis-server runs under valgrind's callgrind (instrumentation off until the measured load),
ten-step runs go through ``--workers`` worker processes (FCALL or, ``--functions off``, EVALSHA),
submission included as in figure 3b, and the instructions over the load are divided by its steps.
Like bench/insn_per_run.py it measures the tree it is run from, with that tree's venv:

    cd /work/wt-OTHER && .venv/bin/python /path/to/bench/redis_insn_per_step.py [--runs 60]

prints the instructions a step, the share inside FCALL/EVALSHA, and the commands a step (INFO
commandstats). Time-driven work (arq's polls, heartbeats) is counted too and runs slower under
valgrind: compare trees at the same settings, alternated, not against CPU figures.
"""

from __future__ import annotations

import argparse
import asyncio
import glob
import os
import stat
import subprocess
import sys
import tempfile
from typing import Any

sys.path.insert(0, os.getcwd())  # the tree measured is the one it runs in

from redis.asyncio import Redis

from bench import figures_functions as ff
from bench.__main__ import Bench
from bench.__main__ import parser as bench_parser
from bench.commit_parts import _callgrind_totals
from bench.plumbing import EFFECTS, run_ids
from tests.support.redis_server import redis_server_binary

WRAPPER = '#!/bin/sh\nexec valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file={out}.%p {binary} "$@"\n'


def _control(pid: str, *args: str) -> None:
    subprocess.run(["callgrind_control", *args, pid], check=True, capture_output=True)


async def measure(a: argparse.Namespace, out: str) -> dict[str, Any]:
    b = Bench(bench_parser().parse_args(["--only", "functions"]))
    b.server.start()
    r = Redis.from_url(b.server.url)
    procs: list[Any] = []
    try:
        pid = ""
        for _ in range(600):
            try:
                pid = str((await r.info("server"))["process_id"])
                break
            except Exception:
                await asyncio.sleep(0.1)
        await b.flush(r)
        profiles = b.pure_profiles()
        producer = b.producer(r, redis_functions=a.functions, profiles=profiles)
        procs = [b.spawn(["-m", "app.worker"], AGENTMILL_REDIS_FUNCTIONS=a.functions, AGENTMILL_PROFILES=profiles)
                 for _ in range(a.workers)]  # fmt: skip
        warm = await producer.submit_many([b.script_run([{"text": "warm"}])] * a.workers)
        await b._ended(producer, run_ids(warm))
        script = [{"toolCalls": [{"name": "echo", "arguments": {"text": "x"}}]}] * ff.STEPS + [
            {"text": "done"}
        ]
        await r.config_resetstat()
        _control(pid, "-z")
        _control(pid, "-i", "on")
        subs = await producer.submit_many([b.script_run(script, agent=EFFECTS)] * a.runs)
        await b._ended(producer, run_ids(subs))
        _control(pid, "-i", "off")
        _control(pid, "-d")
        stats = await r.info("commandstats")
    finally:
        for p in procs:
            b.stop(p)
        await r.aclose()
        b.server.stop()
    await asyncio.sleep(1)
    dump = sorted(glob.glob(f"{out}.{pid}.*"))[-1]
    t = _callgrind_totals(dump)
    total = 0.0
    with open(dump) as f:
        for line in f:
            if line.startswith("totals:"):
                total = float(line.split()[1])
    steps = a.runs * ff.STEPS
    scripts = t.get("fcallCommand", 0.0) + t.get("evalShaCommand", 0.0)
    calls = {
        k.removeprefix("cmdstat_"): v["calls"] / steps for k, v in stats.items() if v["calls"] / steps >= 0.05
    }
    return {"insn_per_step": total / steps, "in_scripts": scripts / total if total else 0.0,
            "calls_per_step": dict(sorted(calls.items(), key=lambda kv: -kv[1])), "callgrind": dump,
            "load": os.getloadavg()[0]}  # fmt: skip


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=60)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--functions", default="on", choices=("on", "off"))
    a = ap.parse_args(argv)
    binary = redis_server_binary()
    assert binary, "redis-server is not installed"
    with tempfile.TemporaryDirectory(prefix="redis-insn-") as d:
        wrapper = os.path.join(d, "redis-server")
        with open(wrapper, "w") as f:
            f.write(WRAPPER.format(out=os.path.join(tempfile.gettempdir(), "redis_insn"), binary=binary))
        os.chmod(wrapper, stat.S_IRWXU)
        os.environ["PATH"] = d + os.pathsep + os.environ["PATH"]  # the bench's redis-server: the wrapper
        got = asyncio.run(measure(a, os.path.join(tempfile.gettempdir(), "redis_insn")))
    print(
        f"{got['insn_per_step']:,.0f} redis-server instructions a step ({got['in_scripts']:.0%} inside the script "
        f"calls), load {got['load']:.1f}; calls a step: "
        + ", ".join(f"{k} {v:.2f}" for k, v in list(got["calls_per_step"].items())[:12])
    )
    print(f"callgrind dump: {got['callgrind']}")


if __name__ == "__main__":
    main(sys.argv[1:])
