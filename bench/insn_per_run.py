"""Instructions per one-step run in one worker process (figure 1's load), exact where CPU time is
not: the worker runs under valgrind's callgrind, ``--warm`` runs go through it (imports, first
compiles, caches), then its counts are zeroed, ``--runs`` runs go through and its counts are dumped.
``--profile`` runs the worker under cProfile instead (switched on and off the same way, by signal)
and writes its stats, to compare two trees function by function (calls per run are exact).

Like bench/cpu_per_run.py it measures the tree it is run from, with that tree's venv:

    cd /work/wt-OTHER && .venv/bin/python /path/to/bench/insn_per_run.py [--profile OUT.prof]

prints {"insn_per_run", "runs", "load", "callgrind": the dump, for callgrind_annotate} (valgrind from
Debian's package). Time-driven work (polls, heartbeats) is counted too and
runs slower under valgrind: compare trees at the same settings, not against CPU figures.
``--delay-ms 1000`` is figure 4's load instead: the model answers after a second, so the window's
runs are all in flight at once (their starts, then their endings).
"""

from __future__ import annotations

import argparse
import asyncio
import glob
import os
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.getcwd())  # the tree measured is the one it runs in

from redis.asyncio import Redis

from bench.__main__ import Bench

# The worker under cProfile: SIGUSR1 starts the profile, SIGUSR2 stops it and writes it.
WRAP = """
import cProfile, os, runpy, signal, sys
sys.path.insert(0, os.getcwd())
prof = cProfile.Profile()
signal.signal(signal.SIGUSR1, lambda *_: prof.enable())
def _stop(*_):
    prof.disable()
    prof.dump_stats(os.environ["INSN_PROFILE_OUT"])
signal.signal(signal.SIGUSR2, _stop)
runpy.run_module(sys.argv[1], run_name="__main__", alter_sys=True)
"""


def start_worker(argv: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        argv, cwd=os.getcwd(), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


def counts(pid: int, on: bool) -> None:
    """callgrind's counts zeroed (``on``: the window starts) or dumped to ``<out>.1`` (it ends)."""
    subprocess.run(["callgrind_control", "-z" if on else "-d", str(pid)], check=True, capture_output=True)


async def drained(b: Any, r: Redis) -> None:
    while not await b.runs_done(r):
        await asyncio.sleep(0.02)


async def measure(
    runs: int, warm: int, profile: str, delay_ms: int = 0, poll_delay: float = 0.05
) -> dict[str, Any]:
    b = Bench(argparse.Namespace(poll_delay=poll_delay))
    b.server.start()
    r = Redis.from_url(b.server.url)
    module = "app.worker" if os.path.isdir("app") else "worker"  # older trees: worker
    d = tempfile.mkdtemp()
    out = os.path.join(d, "callgrind.out")
    if profile:
        wrap = os.path.join(d, "wrap.py")
        with open(wrap, "w") as f:
            f.write(WRAP)
        argv = [sys.executable, wrap, module]
    else:
        argv = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable, "-m", module]
    slots = {"AGENTMILL_MAX_JOBS": str(max(runs, warm) + 10)} if delay_ms else {}  # all in flight
    env = b.env(INSN_PROFILE_OUT=os.path.abspath(profile) if profile else "", **slots)
    p = start_worker(argv, env)
    run = b.script_run([{"text": "hi", "delayMs": delay_ms}] if delay_ms else [{"text": "hi"}])
    try:
        await b.flush(r)
        await b.wait_started(r, 600.0)
        await b.producer(r).submit_many([run] * warm)
        await drained(b, r)
        await asyncio.sleep(1.0)

        def toggle(on: bool) -> None:
            if profile:
                os.kill(p.pid, signal.SIGUSR1 if on else signal.SIGUSR2)
            else:
                counts(p.pid, on)

        toggle(True)
        t0 = time.perf_counter()
        # The worker stopped while the runs are submitted: it finds them all queued when it looks,
        # so how it claims them (and how often it polls meanwhile) does not hang on how fast the
        # producer was beside it on a busy machine (a window claimed in small pieces cost 10 % more).
        os.kill(p.pid, signal.SIGSTOP)
        try:
            await b.producer(r).submit_many([run] * runs)
        finally:
            os.kill(p.pid, signal.SIGCONT)
        await drained(b, r)
        took = time.perf_counter() - t0
        toggle(False)
        await asyncio.sleep(1.0)
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(120)
        await r.aclose()
        b.server.close()
    res: dict[str, Any] = {"runs": runs, "seconds": round(took, 2), "load": os.getloadavg()[0]}
    if not profile:
        res["callgrind"] = dump = glob.glob(out + ".*")[0]
        with open(dump) as f:
            total = next(int(line.split()[1]) for line in f if line.startswith(("summary:", "totals:")))
        res["insn_per_run"] = total / runs
    return res


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=300)
    ap.add_argument("--warm", type=int, default=200)
    ap.add_argument("--profile", default="", help="cProfile's stats to this file instead of callgrind")
    ap.add_argument(
        "--delay-ms",
        type=int,
        default=0,
        help="the model answers after this long (figure 4: 1000, with --runs 1000 all in flight)",
    )
    ap.add_argument(
        "--poll-delay",
        type=float,
        default=0.05,
        help="the worker's poll interval (s): its polls are counted too, more of them the slower the "
        "worker runs under valgrind on a busy machine; a second keeps them out of the comparison",
    )
    a = ap.parse_args()
    print(asyncio.run(measure(a.runs, a.warm, a.profile, a.delay_ms, a.poll_delay)))
