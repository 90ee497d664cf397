"""Peer: SAQ (Redis backend) running the peers' agent job.

Worker: ``python -m saq bench.peer_saq.settings`` (one process; REDIS_URL, AGENTMILL_MAX_JOBS as
its concurrency). SAQ dequeues with a blocking BLMOVE, so it has no poll delay to set. Client side:
enqueue, a done check and the per-job records SAQ keeps (queued, started, completed, ms)."""

from __future__ import annotations

import os
from typing import Any

from bench.peer_job import agent_step

WORKER_ARGV = ["-m", "saq", "bench.peer_saq.settings"]
QUEUE_NAME = "peers"
KEEP_S = 3600  # completed jobs stay readable for the records


async def agent_job(ctx: dict[str, Any], *, inp: dict[str, Any]) -> dict[str, Any]:
    return await agent_step(inp)


def _settings() -> dict[str, Any]:
    from saq import Queue

    return {
        "queue": Queue.from_url(os.environ["REDIS_URL"], name=QUEUE_NAME),
        "functions": [agent_job],
        "concurrency": int(os.environ.get("AGENTMILL_MAX_JOBS", "100")),
    }


def __getattr__(name: str) -> Any:  # `settings` only where the worker imports it (needs REDIS_URL)
    if name == "settings":
        return _settings()
    raise AttributeError(name)


class SaqPeer:
    name = "SAQ"
    worker_argv = WORKER_ARGV

    def __init__(self) -> None:
        self.queue: Any = None

    async def connect(self, redis_url: str, db_url: str) -> None:
        from saq import Queue

        self.queue = Queue.from_url(redis_url, name=QUEUE_NAME)
        await self.queue.connect()

    async def close(self) -> None:
        if self.queue is not None:
            await self.queue.disconnect()

    async def reset(self) -> None:
        await self.queue.redis.flushall()

    async def enqueue(self, key: str, inp: dict[str, Any]) -> None:
        await self.queue.enqueue("agent_job", key=key, inp=inp, ttl=KEEP_S)

    async def done(self) -> bool:
        return int(await self.queue.count("incomplete")) == 0

    async def records(self, keys: list[str]) -> list[tuple[float, float, float]]:
        """(submitted, started, finished) ms per job, from SAQ's job records."""
        out = []
        for k in range(0, len(keys), 1000):
            for job in await self.queue.jobs(keys[k : k + 1000]):
                if job is not None and job.completed:
                    out.append((float(job.queued), float(job.started), float(job.completed)))
        return out

    async def why_lost(self, keys: list[str]) -> str:
        """What SAQ's records say of the jobs that did not complete, e.g. ``t0-0: aborting (swept)``:
        SAQ's start-up sweep aborts a job its worker has moved to the active list but not yet
        marked active."""
        said = []
        for k in range(0, len(keys), 1000):
            for key, job in zip(keys[k : k + 1000], await self.queue.jobs(keys[k : k + 1000]), strict=True):
                if job is None:
                    said.append(f"{key}: no record")
                elif not job.completed:
                    said.append(
                        f"{key}: {getattr(job.status, 'value', job.status)}"
                        + (f" ({job.error})" if job.error else "")
                    )
        return ", ".join(said[:3]) + (f" and {len(said) - 3} more" if len(said) > 3 else "")
