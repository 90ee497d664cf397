"""``python -m bench.latency_timeline``: where a paced one-step run's time goes, stage by stage.

A private redis-server (AOF everysec), one worker process (as ``python -m app.worker``, with wall-clock
stamps at its Redis sends and replies, its wake wait, the run's start, events and ending, and its
collections) and, with ``--monitor``, ``redis-cli monitor`` (when each command ran on the server, the
scripts' own commands marked ``[lua]``; it slows the server); the paced jobs of figure 12 (the
scripted agent answering "hi") submitted one at a time by the producer. Prints, per stage, the median
and p90 µs from the producer's submit start (a stage's second occurrence in a run as ``(2)``; a
pipeline's replies under its first command's name), and the run records' whole-ms latency
(finishedAt − createdAt, both stamped by the scripts on the server's clock). One machine: the
processes' clocks are the same clock.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import gc
import json
import os
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("AGENTMILL_DEV_PROFILES", "true")  # the test-only `scripted` profile

STAMPS: list[tuple[int, str]] = []


def _stamp(what: str) -> None:
    STAMPS.append((time.time_ns(), what))


def _cmd_name(packed: Any) -> str:
    """The command's name, and the function's for FCALL (a packed command's first chunk)."""
    first = packed[0] if isinstance(packed, list) else packed
    parts = bytes(first[:200]).split(b"\r\n")
    words = [p.decode(errors="replace") for p in parts[2::2][:2]]
    if words and words[0].upper() == "FCALL" and len(words) > 1:
        return "FCALL " + words[1]
    return words[0].upper() if words else "?"


def install_worker_stamps(out: str) -> None:
    """Wall-clock stamps in this (worker) process, written to ``out`` when it exits."""
    import redis.asyncio.connection as rc

    from bench import timeline_fine
    from worker.process import arq_worker, wake
    from worker.runner import driver, ending

    send0, read0 = rc.AbstractConnection.send_packed_command, rc.AbstractConnection.read_response

    async def send(self: Any, command: Any, check_health: bool = True) -> None:
        name = _cmd_name(command)
        self._probe_cmd = name
        if name.startswith("FCALL commit") and (turns := timeline_fine.turns_taken()) is not None:
            _stamp(f"turns {turns}")
        _stamp("send " + name)
        await send0(self, command, check_health)

    async def read(self: Any, *a: Any, **k: Any) -> Any:
        r = await read0(self, *a, **k)
        _stamp("reply " + getattr(self, "_probe_cmd", "?"))
        return r

    rc.AbstractConnection.send_packed_command = send  # type: ignore[method-assign]
    rc.AbstractConnection.read_response = read  # type: ignore[method-assign]

    pop0 = wake.Wake._pop

    async def pop(self: Any, *a: Any) -> bool:
        _stamp("wake call start")
        got = await pop0(self, *a)
        if got:
            _stamp("wake popped")
        return got

    wake.Wake._pop = pop  # type: ignore[method-assign,assignment]

    ride0 = getattr(arq_worker.ResilientWorker, "_ride", None)  # (a tree before the claim rode)

    def ride(self: Any, part: Any) -> Any:
        _stamp("ride framed")
        return ride0(self, part) if ride0 is not None else None

    if ride0 is not None:
        arq_worker.ResilientWorker._ride = ride  # type: ignore[method-assign]

    wait0 = wake.Wake.wait

    async def wait(self: Any, timeout_s: float, *, call: bool = True) -> set[int]:
        _stamp("wake wait start")
        got = await wait0(self, timeout_s, call=call)
        if got:
            _stamp("wake wait returned")
        return got

    wake.Wake.wait = wait  # type: ignore[method-assign]

    run0 = arq_worker.ResilientWorker._run_claimed

    async def run_claimed(self: Any, *a: Any, **k: Any) -> None:
        _stamp("job task start")
        if os.environ.get("TIMELINE_FINE"):
            timeline_fine.count_turns()
        await run0(self, *a, **k)
        _stamp("job task end")

    arq_worker.ResilientWorker._run_claimed = run_claimed  # type: ignore[method-assign]

    apply0 = driver.RunDriver._apply

    async def apply(self: Any, ev: Any) -> Any:
        _stamp("apply " + type(ev).__name__)
        return await apply0(self, ev)

    driver.RunDriver._apply = apply  # type: ignore[method-assign]

    end0 = ending.end

    async def end(*a: Any, **k: Any) -> None:
        _stamp("ending start")
        await end0(*a, **k)
        _stamp("ending done")

    ending.end = end

    def gc_cb(phase: str, info: dict[str, int]) -> None:
        _stamp(f"gc{info['generation']} {phase}")

    gc.callbacks.append(gc_cb)
    if os.environ.get("TIMELINE_FINE"):
        timeline_fine.install(_stamp)

    def dump() -> None:
        Path(out).write_text(json.dumps(STAMPS))

    atexit.register(dump)


def worker_main(out: str) -> None:
    install_worker_stamps(out)
    from app.worker import main

    main()


def drive(args: argparse.Namespace) -> None:
    """The server, the monitor and the worker started, the paced jobs submitted (``submit_all``),
    everything stopped, then the report."""
    from tests.support.redis_server import RedisServer

    tmp = Path(tempfile.mkdtemp(prefix="agentmill-timeline-"))
    server = RedisServer(appendonly=True, appendfsync="everysec")
    server.start()
    procs: list[subprocess.Popen[bytes]] = []
    try:
        env = {**os.environ, "REDIS_URL": server.url, "AGENTMILL_WORKER_METRICS_PORT": "-1",
               "AGENTMILL_POLL_DELAY_S": "0.05", "AGENTMILL_LOG_LEVEL": "WARNING",
               "AGENTMILL_TENANT_MAX_RUNNING": "0", "AGENTMILL_TENANT_MAX_ACTIVE": "0",
               "AGENTMILL_TENANT_SUBMITS_PER_SECOND": "0", "AGENTMILL_MAX_JOBS": "100"}  # fmt: skip
        wout = tmp / "worker.json"
        mon = (tmp / "monitor.txt").open("wb")
        host, port = server.url.rsplit("/", 1)[0].rsplit(":", 1)
        host = host.rsplit("/", 1)[-1]
        if args.monitor:  # the server's own times, at a cost: every command is also sent to the monitor
            procs.append(subprocess.Popen(["redis-cli", "-h", host, "-p", port, "monitor"], stdout=mon))
        worker = subprocess.Popen([sys.executable, "-m", "bench.latency_timeline", "--worker-out", str(wout)],
                                  env=env, stderr=(tmp / "worker.log").open("wb"))  # fmt: skip
        procs.append(worker)
        jobs, recs = asyncio.run(submit_all(args, server.url))
        worker.send_signal(signal.SIGTERM)
        worker.wait(20)
        time.sleep(0.3)
        if args.monitor:
            procs[0].send_signal(signal.SIGTERM)
            procs[0].wait(5)
        mon.close()
        report(jobs, recs, json.loads(wout.read_text()), (tmp / "monitor.txt").read_text(errors="replace"))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        server.close()


async def submit_all(args: argparse.Namespace, url: str) -> tuple[list[tuple[int, int, str]], list[Any]]:
    """Warm-up runs, then the paced ones: per run (submit start ns, submit reply ns, run id), and
    its record's (createdAt, finishedAt) ms."""
    from redis.asyncio import Redis

    from producer.service import Producer
    from shared.fields import RunField
    from shared.profiles import profiles_from
    from shared.settings import Settings
    from tests.support.schema import K

    r = Redis.from_url(url)
    s = Settings(redis_url=url, max_batch=100_000)
    producer = Producer(r, settings=s, profiles=profiles_from(s.profiles))

    def run(i: int) -> dict[str, Any]:
        return {
            "agent": "scripted",
            "inputMessages": [{"role": "user", "content": "bench"}],
            "runtimeHints": {"script": [{"text": "hi"}]},
            "metadata": {"i": str(i)},
        }

    async def submit(i: int) -> tuple[int, int, str]:
        t0 = time.time_ns()
        rid = (await producer.submit(run(i))).run_id
        return t0, time.time_ns(), rid

    for i in range(args.warm):  # the worker's first runs (imports, first connections)
        await submit(-1 - i)
        await asyncio.sleep(0.2)
    await asyncio.sleep(1.0)
    jobs = []
    for i in range(args.jobs):
        jobs.append(await submit(i))
        await asyncio.sleep(1 / args.rate)
    await asyncio.sleep(0.5)
    recs = []
    for _, _, rid in jobs:
        c, f = await r.hmget(K.run(rid), [RunField.CREATED_AT, RunField.FINISHED_AT])
        recs.append((int(c), int(f)) if c and f else None)
    await r.aclose()
    return jobs, recs


# Intervals within each run (from the last of the first before the first of the second, named by its
# prefix): their medians over the runs say more than the difference of two stages' medians, each
# taken over different runs.
SPANS = [
    ("client submit start", "worker job task start"),
    ("worker reply BLPOP", "worker job task start"),
    ("worker job task start", "worker ending start"),
    ("worker ending start", "worker send FCALL commit"),
    ("worker job task start", "worker send FCALL commit"),
]


def _monitor(text: str) -> list[tuple[int, str]]:
    """(ns, what) of each command the server ran: the command, the function's name for FCALL, and
    ``[lua]`` before those a script ran."""
    out = []
    for line in text.splitlines():
        try:
            ts, rest = line.split(" ", 1)
            who, cmd = rest.split("] ", 1)
            words = shlex.split(cmd)[:2]
        except ValueError:
            continue
        name = words[0].upper()
        if name == "FCALL":
            name += " " + words[1]
        lua = "lua" in who
        out.append((round(float(ts) * 1e6) * 1000, ("[lua] " if lua else "") + name))
    return out


def report(jobs: list[tuple[int, int, str]], recs: list[Any], worker: list[list[Any]], monitor: str) -> None:
    mon = _monitor(monitor)
    events = sorted([(t, "server " + w) for t, w in mon] + [(t, "worker " + w) for t, w in worker])
    stages: dict[str, list[float]] = {}
    order: dict[str, float] = {}
    spans: dict[tuple[str, str], list[float]] = {}
    for i, (t0, t1, _) in enumerate(jobs):
        end = jobs[i + 1][0] if i + 1 < len(jobs) else t0 + 10**9
        seen: dict[str, int] = {}
        row = [(t0, "client submit start"), (t1, "client submit reply")]
        row += [(t, w) for t, w in events if t0 - 2_000_000 <= t < end]
        for t, w in sorted(row):
            k = w
            n = seen.get(w, 0)
            seen[w] = n + 1
            if n:
                k = f"{w} ({n + 1})"
            stages.setdefault(k, []).append((t - t0) / 1000)
        firsts: dict[str, int] = {}
        for t, w in sorted(row):
            firsts.setdefault(w, t)
        for a, b in SPANS:  # from the last ``a`` before the first ``b``
            tb = next((t for w, t in firsts.items() if w.startswith(b)), None)
            ta = max((t for t, w in row if w == a and tb is not None and t <= tb), default=None)
            if ta is not None and tb is not None:
                spans.setdefault((a, b), []).append((tb - ta) / 1000)
    for k, v in stages.items():
        order[k] = statistics.median(v)
    n = len(jobs)
    print(f"{'stage (µs from the submit start)':<52} {'p50':>8} {'p90':>8} {'seen':>5}")
    for k in sorted(order, key=lambda k: order[k]):
        v = sorted(stages[k])
        if len(v) < n // 2 or "PING" in k:
            continue
        print(f"{k:<52} {order[k]:>8.0f} {v[int(0.9 * (len(v) - 1))]:>8.0f} {len(v):>5}")
    for (a, b), v in spans.items():
        v.sort()
        print(
            f"span {a.removeprefix('worker ')} → {b.removeprefix('worker ')}, each run's own (µs): p50 "
            f"{statistics.median(v):.0f}  p90 {v[int(0.9 * (len(v) - 1))]:.0f}  ({len(v)})"
        )
    lat = [f - c for rec in recs if rec for c, f in [rec]]
    if lat:
        lat.sort()
        print(f"records finishedAt − createdAt ms: mean {statistics.mean(lat):.2f}  p50 {statistics.median(lat):g}  "
              f"p90 {lat[int(0.9 * (len(lat) - 1))]}"
              f"  p99 {lat[int(0.99 * (len(lat) - 1))]}  ({len(lat)} of {n}) histogram "
              f"{ {x: lat.count(x) for x in sorted(set(lat))} }")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--jobs", type=int, default=100)
    ap.add_argument("--rate", type=float, default=20.0)
    ap.add_argument("--warm", type=int, default=20)
    ap.add_argument("--monitor", action="store_true", help="also the server's times (redis-cli monitor)")
    ap.add_argument("--fine", action="store_true", help="also stamps inside the run (bench/timeline_fine.py)")
    ap.add_argument("--worker-out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker_out:
        worker_main(args.worker_out)
        return
    if args.fine:
        os.environ["TIMELINE_FINE"] = "1"
    drive(args)


if __name__ == "__main__":
    main()
