"""The bench's plumbing: its own redis-server, worker and API processes, producers, drains."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import orjson
from arq.constants import default_queue_name, job_key_prefix
from redis.asyncio import Redis

from bench.figure import Figure
from producer.service import Producer
from producer.submission import SubmissionError, Submitted
from shared.profiles import BUILTIN_PROFILES, ToolSettings, profiles_from
from shared.settings import Settings
from tests.support.redis_server import RedisServer, free_port
from tests.support.schema import K

ROOT = Path(__file__).resolve().parents[1]
# The bench drives runs with the test-only `scripted` profile; its workers inherit this.
os.environ.setdefault("AGENTMILL_DEV_PROFILES", "true")
PURE = "scripted-pure"  # the scripted profile with echo declared sideEffects: false (figures 3e, 8g)
# The scripted profile with echo declared sideEffects: true: a tool step as two commits, the baseline
# of 3e and 8g (the built-in echo is declared without side effects by default)
EFFECTS = "scripted-effects"


def api_env(redis_url: str, port: int, **extra: str) -> dict[str, str]:
    """This process's environment for an API (or worker) process of a probe's own: on ``redis_url``,
    the API on ``port``, warnings only, no tenant quota defaults (``AGENTMILL_TENANT_*``), ``extra``."""
    kept = {k: v for k, v in os.environ.items() if not k.startswith("AGENTMILL_TENANT_")}
    return {**kept, "REDIS_URL": redis_url, "AGENTMILL_API_PORT": str(port),
            "AGENTMILL_LOG_LEVEL": "WARNING", **extra}  # fmt: skip


def run_ids(subs: list[Submitted | SubmissionError]) -> list[str]:
    """The run ids of a batch submission's answers; a refused item fails the figure with its reason."""
    out = []
    for sub in subs:
        if isinstance(sub, SubmissionError):
            raise RuntimeError(f"a bench submission was refused: {sub}")
        out.append(sub.run_id)
    return out


async def wait_ready(url: str, within_s: float = 60.0) -> None:
    """Until the API at ``url`` answers ``/readyz`` with 200; RuntimeError after ``within_s``."""
    deadline = time.monotonic() + within_s
    async with httpx.AsyncClient() as c:
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError):
                if (await c.get(f"{url}/readyz")).status_code == 200:
                    return
            await asyncio.sleep(0.05)
    raise RuntimeError(f"the API at {url} did not start within {within_s:g} s")


class Plumbing:
    """Processes, Redis and producers the figures share."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.figures: list[Figure] = []
        self.server = RedisServer()
        self.procs: list[subprocess.Popen[bytes]] = []

    # ---- plumbing ----

    def env(self, **extra: str) -> dict[str, str]:
        return {
            **os.environ,
            "REDIS_URL": self.server.url,
            "AGENTMILL_WORKER_METRICS_PORT": "-1",
            "AGENTMILL_POLL_DELAY_S": str(self.args.poll_delay),
            "AGENTMILL_LOG_LEVEL": "WARNING",
            # One tenant's raw throughput is measured: no per-tenant quotas (they cost nothing
            # extra per run beyond one claim-script lookup, but would cap the figures).
            "AGENTMILL_TENANT_MAX_RUNNING": "0",
            "AGENTMILL_TENANT_MAX_ACTIVE": "0",
            "AGENTMILL_TENANT_SUBMITS_PER_SECOND": "0",
            **extra,
        }

    def spawn(self, argv: list[str], **env: str) -> subprocess.Popen[bytes]:
        p = subprocess.Popen(
            [sys.executable, *argv],
            cwd=ROOT,
            env=self.env(**env),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.procs.append(p)
        return p

    async def spawn_api(self) -> tuple[subprocess.Popen[bytes], str]:
        """`agentmill api` as its own process, auth off; returns it and its base URL once ready."""
        port = free_port()
        p = self.spawn(
            ["-m", "app.cli", "api"],
            AGENTMILL_API_PORT=str(port),
            AGENTMILL_AUTH_DISABLED="true",
            AGENTMILL_MAX_QUEUE_DEPTH="10000000",
        )
        url = f"http://127.0.0.1:{port}"
        await wait_ready(url)
        return p, url

    def stop(self, p: subprocess.Popen[bytes]) -> None:
        if p.poll() is None:
            p.terminate()
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    async def flush(self, r: Redis) -> None:
        await r.flushall()

    async def wait_started(self, r: Redis, within: float = 20.0) -> None:
        """arq records its health key at its first poll: the worker is up and polling."""
        deadline = time.monotonic() + within
        while not await r.exists(K.queue + ":health-check"):
            if time.monotonic() > deadline:
                raise RuntimeError("worker did not start")
            await asyncio.sleep(0.01)

    last_spread_ms: tuple[float, float] = (0.0, 0.0)

    async def drain_time(
        self, r: Redis, n: int, start: Callable[[], Any], done: Callable[[], Awaitable[bool]]
    ) -> float:
        """Start the worker on a pre-filled queue, wait until all is done, and return the span from
        the first job's start to the last job's finish as arq's result records state them."""
        start()
        deadline = time.monotonic() + 600
        while not await done():
            if time.monotonic() > deadline:
                raise RuntimeError("the queue did not drain in 10 minutes")
            await asyncio.sleep(0.02)  # the span comes from arq's records, not from this poll
        starts: list[float] = []
        ends: list[float] = []
        async for key in r.scan_iter(match="arq:result:*", count=1000):
            raw = await r.get(key)
            if raw:
                d = orjson.loads(raw)
                starts.append(d["st"])
                ends.append(d["ft"])
        if len(starts) < n:
            raise RuntimeError(f"only {len(starts)} of {n} jobs left a result")
        # Where the span goes: the spread of the starts, and the fastest job's own duration.
        self.last_spread_ms = (
            max(starts) - min(starts),
            min(e - s for s, e in zip(starts, ends, strict=True)),
        )
        return float(max(ends) - min(starts)) / 1000.0

    async def arq_done(self, r: Redis, queue: str = default_queue_name) -> bool:
        """The bare arq baseline's queue (arq's default) is empty and nothing is in progress. Cheap,
        as it runs every few ms beside what is measured: a SCAN that stops at the first job still in
        progress (a KEYS here parsed a thousand keys 100 times a second, on the measured cores)."""
        if await r.zcard(queue):
            return False
        async for _ in r.scan_iter(match="arq:in-progress:*", count=500):
            return False
        return True

    async def runs_done(self, r: Redis) -> bool:
        return await r.zcard(K.live) == 0 and await self.arq_done(r, K.queue)

    async def raw_enqueue(self, r: Redis, n: int, prefix: str = "noop", function: str = "noop") -> None:
        """Jobs for the bare arq baseline, written as arq writes them (its default queue)."""
        now = int(time.time() * 1000)
        async with r.pipeline(transaction=False) as pipe:
            for i in range(n):
                jid = f"{prefix}{i}"
                pipe.set(
                    job_key_prefix + jid,
                    orjson.dumps({"t": None, "f": function, "a": [], "k": {}, "et": now}),
                    px=86_400_000,
                )
                pipe.zadd(default_queue_name, {jid: now})
            await pipe.execute()

    def producer(self, r: Redis, **settings: Any) -> Producer:
        settings.setdefault("max_batch", 100_000)
        s = Settings(redis_url=self.server.url, **settings)
        return Producer(r, settings=s, profiles=profiles_from(s.profiles))

    @staticmethod
    def pure_profiles() -> str:
        """A profile file holding ``PURE``, the scripted profile whose ``echo`` declares no side
        effects, so a reply and its echo's result go out in one commit (AGENTMILL_STEP_HOLD_MS), and
        ``EFFECTS``, the same with side effects declared: two commits a step."""
        scripted = next(p for p in BUILTIN_PROFILES if p.name == "scripted")

        def declared(name: str, side_effects: bool) -> Any:
            settings = {**scripted.tool_settings, "echo": ToolSettings(side_effects=side_effects)}
            return scripted.model_copy(update={"name": name, "tool_settings": settings})

        pure, effects = declared(PURE, False), declared(EFFECTS, True)
        path = ROOT / "bench" / "results" / "pure-profiles.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        profiles = [p.model_dump(by_alias=True, exclude_defaults=True) for p in (pure, effects)]
        path.write_bytes(orjson.dumps({"profiles": profiles}))
        return str(path)

    @staticmethod
    def script_run(script: list[dict[str, Any]], agent: str = "scripted") -> dict[str, Any]:
        return {
            "agent": agent,
            "inputMessages": [{"role": "user", "content": "bench"}],
            "runtimeHints": {"script": script},
        }
