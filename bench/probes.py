"""Latency probes run as separate processes (a Redis tail, a writer, an SSE reader) and small readers."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from redis.asyncio import Redis


def read_json(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    data: dict[str, Any] = json.loads(path.read_text())
    path.unlink(missing_ok=True)
    return data


def vm_kib(pid: int, field_name: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field_name + ":"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def tree_kib(pid: int, field_name: str) -> int:
    """``vm_kib`` of ``pid`` and its children, summed (a supervisor and its worker processes)."""
    try:
        kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        kids = []
    return vm_kib(pid, field_name) + sum(vm_kib(int(k), field_name) for k in kids)


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a live process (Linux)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children(pid: int) -> list[int]:
    try:
        return [int(k) for k in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def tree_cpu_s(pid: int) -> tuple[float, float]:
    """``process_cpu_s`` of ``pid``, and of its live children summed (a supervisor, its worker processes)."""
    return process_cpu_s(pid), sum(process_cpu_s(k) for k in children(pid))


async def redis_cpu_s(r: Any) -> float:
    """redis-server's user + system CPU seconds (INFO cpu)."""
    i = await r.info("cpu")
    return float(i["used_cpu_user"]) + float(i["used_cpu_sys"])


def pct(xs: list[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(len(s) * p / 100))] if s else float("nan")


TAIL = r"""
import sys, time, redis
r = redis.Redis.from_url(sys.argv[1]); key = sys.argv[2]; until = time.time() + float(sys.argv[3]); last = '0-0'; out = []
start = time.time() * 1000  # events published before the reader listened are backlog, not latency
while time.time() < until:
    got = r.xread({key: last}, block=200)
    now = time.time() * 1000
    for _, entries in got or []:
        for eid, f in entries:
            last = eid
            if float(f[b'ts']) >= start:
                out.append(now - float(f[b'ts']))
print(','.join(f'{x:.3f}' for x in out))
"""

WRITER = r"""
import sys, time, redis
r = redis.Redis.from_url(sys.argv[1])
for i in range(int(sys.argv[3])):
    r.xadd(sys.argv[2], {'ts': repr(time.time() * 1000)})
    time.sleep(0.02)
"""


SSE_TAIL = r"""
import sys, time, json, httpx
url, run_id, until = sys.argv[1], sys.argv[2], time.time() + float(sys.argv[3]); out = []
with httpx.stream("GET", f"{url}/v1/runs/{run_id}/events", timeout=None) as resp:
    start = time.time() * 1000  # the stream is open: earlier events are backlog, not latency
    for line in resp.iter_lines():
        if line.startswith("data:"):
            now, ts = time.time() * 1000, float(json.loads(line[5:])["ts"])
            if ts >= start:
                out.append(now - ts)
        if time.time() > until:
            break
print(','.join(f'{x:.3f}' for x in out))
"""


async def _probe(script: str, *args: str) -> list[float]:
    """Run a reader in its own process; it prints its latencies (ms) comma-separated."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", script, *args, stdout=asyncio.subprocess.PIPE
    )
    out, _ = await proc.communicate()
    return [float(x) for x in out.decode().strip().split(",") if x]


async def sse_latency(url: str, run_id: str, seconds: float) -> list[float]:
    return await _probe(SSE_TAIL, url, run_id, str(seconds))


async def tail_latency(url: str, key: str, seconds: float) -> list[float]:
    return await _probe(TAIL, url, key, str(seconds))


async def raw_xadd_latency(url: str, n: int = 150) -> list[float]:
    key = "bench:raw:stream"
    reader = asyncio.create_task(tail_latency(url, key, n * 0.02 + 1.0))
    await asyncio.sleep(0.3)
    writer = await asyncio.create_subprocess_exec(sys.executable, "-c", WRITER, url, key, str(n))
    await writer.wait()
    return await reader


async def until_up(r: Redis, within_s: float = 30.0) -> None:
    """Until the redis-server behind ``r`` answers (one started under callgrind takes seconds)."""
    for _ in range(int(within_s * 10)):
        try:
            await r.ping()
            return
        except Exception:
            await asyncio.sleep(0.1)
