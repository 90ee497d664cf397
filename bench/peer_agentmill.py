"""agentmill in the peers figure: the same one-step job as a run of the scripted (test) model
profile, one reply "hi" with no delay, as figure 1 runs it.

Worker: ``python -m app.worker`` (REDIS_URL, AGENTMILL_MAX_JOBS, AGENTMILL_POLL_DELAY_S). Client side:
the producer's submit, a done check and the run's own record (createdAt, finishedAt; the start from
arq's result record of its first dispatch)."""

from __future__ import annotations

from typing import Any

import orjson
from arq.constants import result_key_prefix
from redis.asyncio import Redis

from producer.service import Producer
from shared.fields import RunField
from shared.profiles import profiles_from
from shared.settings import Settings
from tests.support.schema import K

WORKER_ARGV = ["-m", "app.worker"]


class AgentmillPeer:
    name = "agentmill"
    worker_argv = WORKER_ARGV

    def __init__(self) -> None:
        self.r: Redis | None = None
        self.producer: Producer | None = None
        self.runs: dict[str, str] = {}  # the bench's key -> run id

    async def connect(self, redis_url: str, db_url: str) -> None:
        self.r = Redis.from_url(redis_url)
        s = Settings(redis_url=redis_url, max_batch=100_000)
        self.producer = Producer(self.r, settings=s, profiles=profiles_from(s.profiles))

    async def close(self) -> None:
        if self.r is not None:
            await self.r.aclose()

    async def reset(self) -> None:
        assert self.r is not None
        await self.r.flushall()
        self.runs = {}

    async def enqueue(self, key: str, inp: dict[str, Any]) -> None:
        assert self.producer is not None
        run = {
            "agent": "scripted",
            "inputMessages": inp["messages"],
            "runtimeHints": {"script": [{"text": "hi"}]},
        }
        self.runs[key] = (await self.producer.submit(run)).run_id

    async def done(self) -> bool:
        assert self.r is not None
        if await self.r.zcard(K.live) or await self.r.zcard(K.queue):
            return False
        async for _ in self.r.scan_iter(match="arq:in-progress:*", count=500):
            return False
        return True

    async def records(self, keys: list[str]) -> list[tuple[float, float, float]]:
        """(submitted, started, finished) ms per run: the run's createdAt and finishedAt, the start
        of its first dispatch from arq's result record."""
        assert self.r is not None
        rids = [self.runs[k] for k in keys if k in self.runs]
        async with self.r.pipeline(transaction=False) as pipe:
            for rid in rids:
                pipe.hmget(K.run(rid), [RunField.CREATED_AT, RunField.FINISHED_AT])
                pipe.get(result_key_prefix + K.job_id(rid, 1))
            got = await pipe.execute()
        out = []
        for (created, finished), raw in zip(got[::2], got[1::2], strict=True):
            if created and finished:
                started = orjson.loads(raw)["st"] if raw else float(created)
                out.append((float(created), float(started), float(finished)))
        return out
