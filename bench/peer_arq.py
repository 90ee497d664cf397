"""Peer: bare arq (figure 1's baseline worker, bench/bare_arq.py) running the peers' agent job.

Worker: ``python -m arq bench.peer_arq.WorkerSettings`` (REDIS_URL, AGENTMILL_MAX_JOBS,
AGENTMILL_POLL_DELAY_S). Client side: enqueue, a done check and the per-job records arq keeps
(enqueue, start and finish times, ms)."""

from __future__ import annotations

from typing import Any

import orjson
from arq import create_pool
from arq.connections import ArqRedis, RedisSettings
from arq.constants import result_key_prefix

from bench.peer_job import agent_step
from shared.dispatch import deserialize, serialize

WORKER_ARGV = ["-m", "arq", "bench.peer_arq.WorkerSettings"]
QUEUE = "arq:queue"


async def agent_job(ctx: dict[str, Any], inp: dict[str, Any]) -> dict[str, Any]:
    return await agent_step(inp)


def __getattr__(name: str) -> Any:
    """``WorkerSettings`` only where the worker imports it: bare_arq's reads REDIS_URL."""
    if name == "WorkerSettings":
        from bench import bare_arq

        # arq reads a settings class's own __dict__, not inherited attributes: a copy, not a subclass.
        own = {k: v for k, v in vars(bare_arq.WorkerSettings).items() if not k.startswith("__")}
        return type("WorkerSettings", (), {**own, "functions": [agent_job]})
    raise AttributeError(name)


class ArqPeer:
    name = "bare arq"
    worker_argv = WORKER_ARGV

    def __init__(self) -> None:
        self.pool: ArqRedis | None = None

    async def connect(self, redis_url: str, db_url: str) -> None:
        self.pool = await create_pool(
            RedisSettings.from_dsn(redis_url), job_serializer=serialize, job_deserializer=deserialize
        )

    async def close(self) -> None:
        if self.pool is not None:
            await self.pool.aclose()

    async def reset(self) -> None:
        assert self.pool is not None
        await self.pool.flushall()

    async def enqueue(self, key: str, inp: dict[str, Any]) -> None:
        assert self.pool is not None
        await self.pool.enqueue_job("agent_job", inp, _job_id=key)

    async def done(self) -> bool:
        assert self.pool is not None
        if await self.pool.zcard(QUEUE):
            return False
        async for _ in self.pool.scan_iter(match="arq:in-progress:*", count=500):
            return False
        return True

    async def records(self, keys: list[str]) -> list[tuple[float, float, float]]:
        """(submitted, started, finished) ms per job, from arq's result records."""
        assert self.pool is not None
        out = []
        for k in range(0, len(keys), 1000):
            for raw in await self.pool.mget([result_key_prefix + key for key in keys[k : k + 1000]]):
                if raw:
                    d = orjson.loads(raw)
                    if d.get("s"):
                        out.append((float(d["et"]), float(d["st"]), float(d["ft"])))
        return out
