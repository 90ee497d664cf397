"""Economy runs on real worker processes against the local batch server (tests/support/batch_server.py):
the profiles (an economy profile ``eco`` on an ``openai`` or ``anthropic`` provider, a scripted
``std``), worker processes whose batches close fast, a producer that knows the profiles, a worker
that dies at a failpoint before others take over, and the runs finished on fresh workers."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import orjson
from redis.asyncio import Redis

from shared.profiles import load_profiles
from tests.integration.helpers import producer_for, wait_all
from tests.support.procs import WorkerProc

__all__ = [
    "FAST_BATCHES",
    "FAST_TAKEOVER",
    "died_at",
    "economy_producer",
    "economy_run",
    "finished_on",
    "procs",
    "profiles",
    "started",
]

# A provider batch closes at 50 requests or 0.2 s; polled every 0.05 to 0.2 s; a batcher's lease is 1 s.
FAST_BATCHES = {
    "AGENTMILL_ECONOMY_BATCH_REQUESTS": "50",
    "AGENTMILL_ECONOMY_BATCH_AGE_S": "0.2",
    "AGENTMILL_ECONOMY_POLL_MIN_S": "0.05",
    "AGENTMILL_ECONOMY_POLL_MAX_S": "0.2",
    "AGENTMILL_ECONOMY_LEASE_MS": "1000",
}
# A worker that dies holding runs (at a failpoint) loses them after a 2 s lease, not the default
# 30 s: its successors (polling the lost every 0.3 s) take them over a few seconds after the kill.
FAST_TAKEOVER = {
    "AGENTMILL_LEASE_MS": "2000",
    "AGENTMILL_HEARTBEAT_MS": "300",
    "AGENTMILL_RECONCILE_MS": "300",
}
OPENAI = {"kind": "openai", "model": "gpt-4o-mini", "pricing": {"inputPerMTok": 1.0, "outputPerMTok": 2.0}}


def profiles(
    tmp_path: Path, base_url: str, *, provider: dict[str, Any] | None = None, **economy: Any
) -> Path:
    """profiles.json: ``eco`` (``provider``, OPENAI unless given, at ``base_url``; the echo tool; the
    economy lane with ``economy``'s options) and ``std`` (scripted)."""
    path = tmp_path / "profiles.json"
    eco = {**(provider or OPENAI), "baseUrl": base_url}
    path.write_bytes(orjson.dumps({"profiles": [
        {"name": "eco", "provider": eco, "tools": ["echo"], "economy": {"enabled": True, **economy}},
        {"name": "std", "provider": {"kind": "scripted"}},
    ]}))  # fmt: skip
    return path


def economy_run(i: int) -> dict[str, Any]:
    return {"agent": "eco", "lane": "economy", "inputMessages": [{"role": "user", "content": f"ticket {i}"}]}


def procs(redis_url: str, path: Path, n: int, **env: str) -> list[WorkerProc]:
    """``n`` worker processes of the profiles at ``path``, their batches fast (FAST_BATCHES)."""
    base = {"AGENTMILL_PROFILES": str(path), **FAST_BATCHES, **env}
    return [WorkerProc(redis_url, env=base).start() for _ in range(n)]


def economy_producer(redis: Redis, redis_url: str, path: Path, **kwargs: Any) -> Any:
    """A producer that reads the profiles at ``path``."""
    p = producer_for(redis, redis_url, **kwargs)
    p.profiles = load_profiles(str(path))
    return p


async def started(p: Any, workers: list[WorkerProc]) -> None:
    """The workers are up (a standard run of the scripted profile done): a deadline counted from
    now is not spent on their start."""
    std = await p.submit({"agent": "std", "inputMessages": [{"role": "user", "content": "up?"}]})
    await wait_all(p, [std.run_id], 30)


async def died_at(redis_url: str, path: Path, point: str, within: float = 30) -> None:
    """One worker started with the failpoint ``point``, which must kill it (SIGKILL at the point)
    within ``within`` seconds; the runs it held are lost after its short lease (FAST_TAKEOVER)."""
    (doomed,) = procs(redis_url, path, 1, **FAST_TAKEOVER, AGENTMILL_FAILPOINTS=point)
    deadline = time.monotonic() + within
    while doomed.alive and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert not doomed.alive, f"the worker did not die at {point} within {within} s"


async def finished_on(
    p: Any, ids: list[str], redis_url: str, path: Path, n: int = 2, within: float = 90, **env: str
) -> dict[str, Any]:
    """``ids`` run to their end on ``n`` fresh workers (stopped after), which take over the runs of a
    worker that died (FAST_TAKEOVER, unless ``env`` says otherwise): their records."""
    workers = procs(redis_url, path, n, **{**FAST_TAKEOVER, **env})
    try:
        return await wait_all(p, ids, within)
    finally:
        for w in workers:
            w.stop()
