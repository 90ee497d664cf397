"""redis-server's instructions per step of figure 3b's load, exact where its CPU time is not: the
bench's redis-server runs under valgrind's callgrind (instrumentation off until the measured load),
ten-step runs go through ``--workers`` worker processes (FCALL or, ``--functions off``, EVALSHA),
submission included as in figure 3b, and the instructions over the load are divided by its steps.
Like bench/insn_per_run.py it measures the tree it is run from, with that tree's venv:

    cd /work/wt-OTHER && .venv/bin/python /path/to/bench/redis_insn_per_step.py [--runs 60] [--cpu]

prints the instructions a step, the share inside FCALL/EVALSHA and, inside those, the commands the
scripts ran (callgrind's ``call'2``), and the commands a step (INFO commandstats). ``--cpu`` runs the
same load on a plain redis-server and prints its INFO cpu a step instead, user and system apart
(figure 3b's measure, which counts the system CPU of a request's socket reads and writes that
callgrind leaves out); ``--json OUT`` also writes the figures.

One copy serves older checkouts too, as bench/cpu_per_run.py does (539fcba's, before the
``scripted-effects`` profile and ``app/``): it needs only the tree's ``Bench`` (``server``,
``flush``, ``producer``, ``spawn``, ``script_run``, ``pure_profiles``, ``_ended``) and keeps the
rest here (bench/callgrind.py it loads from beside itself). A tree without ``EFFECTS`` runs the ``scripted`` profile, whose echo was undeclared
there: two commits a step, as ``EFFECTS`` declares it now.

Time-driven work (arq's polls, heartbeats) is counted too and runs slower under valgrind: compare
trees at the same settings, alternated, not against CPU figures.
"""

from __future__ import annotations

import argparse
import asyncio
import glob
import importlib.util
import json
import os
import stat
import subprocess
import sys
import tempfile
from typing import Any

sys.path.insert(0, os.getcwd())  # the tree measured is the one it runs in

from redis.asyncio import Redis

from bench import figures_functions as ff
from bench import plumbing
from bench.__main__ import Bench
from bench.__main__ import parser as bench_parser
from tests.support.redis_server import redis_server_binary

# A tool step as two commits: the profile declaring echo with side effects, or, in a tree older
# than that profile, the built-in scripted one (echo undeclared, so two commits a step there).
EFFECTS: str = getattr(plumbing, "EFFECTS", "scripted")
WORKER = "app.worker" if os.path.exists("app/worker.py") else "worker"  # the module moved to app/

# bench/callgrind.py from beside this file, not from the measured tree (older ones lack it).
_spec = importlib.util.spec_from_file_location(
    "_callgrind", os.path.join(os.path.dirname(__file__), "callgrind.py")
)
assert _spec is not None and _spec.loader is not None
_callgrind = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_callgrind)

WRAPPER = '#!/bin/sh\nexec valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file={out}.%p {binary} "$@"\n'


def _run_ids(subs: list[Any]) -> list[str]:
    """A batch submission's run ids; a refused item (no run_id) fails the measurement."""
    refused = [s for s in subs if not hasattr(s, "run_id")]
    if refused:
        raise RuntimeError(f"a submission was refused: {refused[0]}")
    return [s.run_id for s in subs]


def _control(pid: str, *args: str) -> None:
    subprocess.run(["callgrind_control", *args, pid], check=True, capture_output=True)


async def _cpu(r: Redis) -> tuple[float, float]:
    i = await r.info("cpu")
    return float(i["used_cpu_user"]), float(i["used_cpu_sys"])


IO = ("total_reads_processed", "total_writes_processed", "total_net_input_bytes", "total_net_output_bytes")


async def _io(r: Redis) -> dict[str, int]:
    """The server's socket reads and writes and its bytes in and out so far (INFO stats)."""
    i = await r.info("stats")
    return {k: int(i.get(k, 0)) for k in IO}


async def measure(a: argparse.Namespace, out: str | None) -> dict[str, Any]:
    """The load on the bench's redis-server: under callgrind when ``out`` names its dumps' prefix,
    else plain, with its INFO cpu read around the load."""
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
        procs = [b.spawn(["-m", WORKER], AGENTMILL_REDIS_FUNCTIONS=a.functions, AGENTMILL_PROFILES=profiles)
                 for _ in range(a.workers)]  # fmt: skip
        warm = await producer.submit_many([b.script_run([{"text": "warm"}])] * a.workers)
        await b._ended(producer, _run_ids(warm))
        script = [{"toolCalls": [{"name": "echo", "arguments": {"text": "x"}}]}] * ff.STEPS + [
            {"text": "done"}
        ]
        await r.config_resetstat()
        if out:
            _control(pid, "-z")
            _control(pid, "-i", "on")
        user0, sys0 = await _cpu(r)
        io0 = await _io(r)
        subs = await producer.submit_many([b.script_run(script, agent=EFFECTS)] * a.runs)
        await b._ended(producer, _run_ids(subs))
        user1, sys1 = await _cpu(r)
        io1 = await _io(r)
        if out:
            _control(pid, "-i", "off")
            _control(pid, "-d")
        stats = await r.info("commandstats")
    finally:
        for p in procs:
            b.stop(p)
        await r.aclose()
        b.server.stop()
    steps = a.runs * ff.STEPS
    calls = {
        k.removeprefix("cmdstat_"): v["calls"] / steps for k, v in stats.items() if v["calls"] / steps >= 0.05
    }
    got: dict[str, Any] = {"calls_per_step": dict(sorted(calls.items(), key=lambda kv: -kv[1])),
                           "io_per_step": {k.removeprefix("total_"): (io1[k] - io0[k]) / steps for k in IO},
                           "load": os.getloadavg()[0]}  # fmt: skip
    if not out:
        script_usec = sum(v["usec"] for k, v in stats.items() if k in ("cmdstat_fcall", "cmdstat_evalsha"))
        return {**got, "user_us_per_step": (user1 - user0) / steps * 1e6,
                "sys_us_per_step": (sys1 - sys0) / steps * 1e6, "script_usec_per_step": script_usec / steps}  # fmt: skip
    await asyncio.sleep(1)
    dump = sorted(glob.glob(f"{out}.{pid}.*"))[-1]
    t = _callgrind.totals(dump)
    total = 0.0
    with open(dump) as f:
        for line in f:
            if line.startswith("totals:"):
                total = float(line.split()[1])
    scripts = t.get("fcallCommand", 0.0) + t.get("evalShaCommand", 0.0)
    return {**got, "insn_per_step": total / steps, "in_scripts": scripts / total if total else 0.0,
            "script_insn_per_step": scripts / steps, "commands_in_scripts_per_step": t.get("call'2", 0.0) / steps,
            "callgrind": dump}  # fmt: skip


def _report(got: dict[str, Any]) -> None:
    calls = ", ".join(f"{k} {v:.2f}" for k, v in list(got["calls_per_step"].items())[:12])
    print(
        "a step's socket reads, writes, bytes in, out: "
        + ", ".join(f"{v:,.1f}" for v in got["io_per_step"].values())
    )
    if "user_us_per_step" in got:
        print(
            f"redis-server CPU a step {got['user_us_per_step'] + got['sys_us_per_step']:.1f} µs (user "
            f"{got['user_us_per_step']:.1f}, system {got['sys_us_per_step']:.1f}; script calls' usec "
            f"{got['script_usec_per_step']:.1f}), load {got['load']:.1f}; calls a step: {calls}"
        )
        return
    inside, commands = got["script_insn_per_step"], got["commands_in_scripts_per_step"]
    print(
        f"{got['insn_per_step']:,.0f} redis-server instructions a step ({got['in_scripts']:.0%} inside the script "
        f"calls), load {got['load']:.1f}; calls a step: {calls}"
    )
    print(
        f"inside the script calls {inside:,.0f} a step, of which the commands they ran {commands:,.0f}"
        f" ({inside / max(commands, 1.0):.2f} ×)"
    )
    print(f"callgrind dump: {got['callgrind']}")


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=60)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--functions", default="on", choices=("on", "off"))
    ap.add_argument("--cpu", action="store_true", help="no valgrind: INFO cpu a step, user and system")
    ap.add_argument("--json", help="also write the figures to this file")
    a = ap.parse_args(argv)
    if a.cpu:
        got = asyncio.run(measure(a, None))
    else:
        binary = redis_server_binary()
        assert binary, "redis-server is not installed"
        with tempfile.TemporaryDirectory(prefix="redis-insn-") as d:
            wrapper = os.path.join(d, "redis-server")
            with open(wrapper, "w") as f:
                f.write(WRAPPER.format(out=os.path.join(tempfile.gettempdir(), "redis_insn"), binary=binary))
            os.chmod(wrapper, stat.S_IRWXU)
            os.environ["PATH"] = d + os.pathsep + os.environ["PATH"]  # the bench's redis-server: the wrapper
            got = asyncio.run(measure(a, os.path.join(tempfile.gettempdir(), "redis_insn")))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({**got, "tree": os.getcwd(), "runs": a.runs, "workers": a.workers}, f, indent=1)
    _report(got)


if __name__ == "__main__":
    main(sys.argv[1:])
