"""Where a one-step job's cost goes in figure 12's setup (bench/figures_peers.py), per peer:
``bin/dev python -m bench.peer_cost [--peers agentmill saq] [--fsync always] [--runs N]``.

One worker process per peer (concurrency 100 as the figure's, or --concurrency), against a private redis-server
with AOF at the level asked for, twice: a burst (N jobs enqueued while the worker is stopped by
SIGSTOP, then let go) and a paced pass (jobs submitted one by one at 100/s to the idle worker, the
figure's latency pass). Per job: the worker's CPU (/proc), redis-server's CPU (INFO cpu), the
commands Redis ran (top-level, and inside scripts from INFO commandstats) and its socket reads
(INFO stats total_reads_processed, less the submitter's own round trips, which this process counts
on its connections: a rough count of the worker's round trips, which share reads when they come
together; tests/integration/test_run_round_trips.py counts a run's exactly). CPU time holds up better than rates on a
shared machine; compare trees side by side, each from its own checkout.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.connection import AbstractConnection

from bench.figures_peers import make_peer
from bench.peer_job import job_input
from bench.plumbing import ROOT
from tests.support.redis_server import RedisServer

TICK = os.sysconf("SC_CLK_TCK")
SENT = [0]  # round trips this process sent (the submitter's)


def count_round_trips() -> None:
    real = AbstractConnection.send_packed_command

    async def send(self: Any, command: Any, check_health: bool = True) -> None:
        SENT[0] += 1
        await real(self, command, check_health)

    AbstractConnection.send_packed_command = send  # type: ignore[method-assign]


def cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


async def snapshot(r: Redis, pid: int) -> dict[str, Any]:
    sent = SENT[0]
    info = await r.info("all")
    stats = {k[len("cmdstat_") :]: int(v["calls"]) for k, v in info.items() if k.startswith("cmdstat_")}
    return {
        "worker": cpu_s(pid),
        "redis": float(info["used_cpu_user"]) + float(info["used_cpu_sys"]),
        "top": int(info["total_commands_processed"]),
        "reads": int(info["total_reads_processed"]),
        "sent": sent + 1,  # with the INFO itself
        "cmds": stats,
    }


def per_job(a: dict[str, Any], b: dict[str, Any], n: int) -> dict[str, Any]:
    cmds = {k: (b["cmds"].get(k, 0) - a["cmds"].get(k, 0)) / n for k in b["cmds"]}
    sent = b["sent"] - a["sent"]
    return {
        "worker_ms": round((b["worker"] - a["worker"]) * 1000 / n, 3),
        "redis_ms": round((b["redis"] - a["redis"]) * 1000 / n, 3),
        "worker_reads": round((b["reads"] - a["reads"] - sent) / n, 2),
        "submit_round_trips": round(sent / n, 2),
        "top_commands": round((b["top"] - a["top"] - sent) / n, 2),
        "commands": {k: round(v, 2) for k, v in sorted(cmds.items(), key=lambda kv: -kv[1]) if v >= 0.05},
    }


def start_worker(argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as f:
        return subprocess.Popen([sys.executable, *argv], cwd=ROOT, env=env, stdout=f, stderr=f)


async def measure(
    name: str, fsync: str, n: int, paced: int, rate: float, concurrency: int = 100
) -> dict[str, Any]:
    peer, why = make_peer(name)
    if peer is None:
        raise SystemExit(why)
    server = RedisServer(appendonly=True, appendfsync=fsync)
    server.start()
    log = Path(tempfile.mkdtemp(prefix="peer-cost-")) / "worker.log"
    env = {
        **os.environ,
        "REDIS_URL": server.url,
        "AGENTMILL_MAX_JOBS": str(concurrency),
        "AGENTMILL_WORKER_METRICS_PORT": "-1",
        "AGENTMILL_POLL_DELAY_S": "0.05",
        "AGENTMILL_LOG_LEVEL": "WARNING",
        "AGENTMILL_TENANT_MAX_RUNNING": "0",
        "AGENTMILL_TENANT_MAX_ACTIVE": "0",
        "AGENTMILL_TENANT_SUBMITS_PER_SECOND": "0",
        "AGENTMILL_DEV_PROFILES": "true",
    }
    r = Redis.from_url(server.url)
    await peer.connect(server.url, "")
    out: dict[str, Any] = {}
    w: subprocess.Popen[bytes] | None = None
    try:
        await peer.reset()
        w = start_worker(peer.worker_argv, env, log)
        await peer.enqueue("warm", job_input(0))  # started, scripts loaded, one job done
        t_end = time.monotonic() + 60
        while not await peer.done():
            if time.monotonic() > t_end or w.poll() is not None:
                raise RuntimeError(f"{name}: worker did not start: {log.read_text()[-500:]}")
            await asyncio.sleep(0.05)
        await asyncio.sleep(1.0)
        # burst: enqueued while the worker is stopped, then drained
        os.kill(w.pid, signal.SIGSTOP)
        for k in range(0, n, 100):
            await asyncio.gather(*(peer.enqueue(f"b{i}", job_input(i)) for i in range(k, min(n, k + 100))))
        a = await snapshot(r, w.pid)
        os.kill(w.pid, signal.SIGCONT)
        t0 = time.monotonic()
        while not await peer.done():
            await asyncio.sleep(0.01)
        dt = time.monotonic() - t0
        out["burst"] = {**per_job(a, await snapshot(r, w.pid), n), "runs_s": round(n / dt)}
        await asyncio.sleep(0.5)
        # paced: the idle worker woken for each job
        a = await snapshot(r, w.pid)
        t0 = time.monotonic()
        tasks = []
        for i in range(paced):
            await asyncio.sleep(max(0.0, t0 + i / rate - time.monotonic()))
            tasks.append(asyncio.create_task(peer.enqueue(f"p{i}", job_input(i))))
        await asyncio.gather(*tasks)
        while not await peer.done():
            await asyncio.sleep(0.01)
        b = await snapshot(r, w.pid)
        lat = sorted(f - c for c, _, f in await peer.records([f"p{i}" for i in range(paced)]))
        out["paced"] = {
            **per_job(a, b, paced),
            "p50_ms": lat[len(lat) // 2] if lat else None,
            "p99_ms": lat[min(len(lat) - 1, round(0.99 * (len(lat) - 1)))] if lat else None,
        }
        # idle: what the worker costs with nothing to do, per second
        a = await snapshot(r, w.pid)
        await asyncio.sleep(1.0)
        out["idle_per_s"] = per_job(a, await snapshot(r, w.pid), 1)
    finally:
        if w is not None and w.poll() is None:
            w.terminate()
            w.wait(20)
        await peer.close()
        await r.aclose()
        server.close()
    return out


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--peers", nargs="+", default=["agentmill", "saq"])
    ap.add_argument("--fsync", nargs="+", default=["everysec", "always"])
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--paced", type=int, default=200)
    ap.add_argument("--rate", type=float, default=100.0)
    ap.add_argument("--concurrency", type=int, default=100, help="the worker's slots (figure 12: 100)")
    a = ap.parse_args()
    count_round_trips()
    for fsync in a.fsync:
        for name in a.peers:
            res = await measure(name, fsync, a.runs, a.paced, a.rate, a.concurrency)
            print(f"== {name} appendfsync {fsync} (load {os.getloadavg()[0]:.1f})")
            for phase, v in res.items():
                print(f"  {phase}: {v}")


if __name__ == "__main__":
    asyncio.run(main())
