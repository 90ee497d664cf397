"""arq's per-job bookkeeping at the end of a job, for every job ending in one event-loop turn at once.

arq finishes each job with its own MULTI (delete the job, retry and in-progress keys, drop the job
from the queue and the abort set, store the result). At a thousand runs in flight those
transactions, and the Python that builds them, are a large part of a worker's CPU. The jobs that end
in one loop turn share one pipelined round trip here: one DEL and one ZREM for all of them, one SET
per stored result. The keys and the result record are arq's, so arq's ``Job.status()`` and
``Job.result()`` read them as before. A job's task waits until its keys are gone, as with arq.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from arq.constants import (
    in_progress_key_prefix,
    job_key_prefix,
    result_key_prefix,
    retry_key_prefix,
)
from redis.exceptions import RedisError

from shared.partitions import Partitions
from worker.batcher import pipelined

log = logging.getLogger("agentmill.worker")

# (job id, finished, result record or None): an unfinished job (cancelled at shutdown) gives back
# only its in-progress key; its job key stays, as arq leaves it, for the reconciler's checks.
_End = tuple[str, bool, bytes | None]


class JobFinisher:
    def __init__(
        self, parts: Partitions[Any], keep_result_ms: int, *, tries: int = 3, retry_s: float = 0.5
    ) -> None:
        self.parts = parts
        self.keep_result_ms = keep_result_ms
        self.tries = tries
        self.retry_s = retry_s
        # Bounded by the worker's max_jobs: each running job adds one entry, once.
        self.pending: list[tuple[_End, asyncio.Future[None]]] = []
        self.scheduled = False
        self.sending: set[asyncio.Task[None]] = set()
        self.batches = 0  # round trips sent (for the bench)

    def finish(self, job_id: str, finished: bool, result: bytes | None) -> asyncio.Future[None]:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        self.pending.append(((job_id, finished, result), fut))
        if not self.scheduled:
            self.scheduled = True
            loop.call_soon(self._flush)
        return fut

    def _flush(self) -> None:
        self.scheduled = False
        batch, self.pending = self.pending, []
        if batch:
            task = asyncio.get_running_loop().create_task(self._send(batch))
            self.sending.add(task)
            task.add_done_callback(self.sending.discard)

    async def _send(self, batch: list[tuple[_End, asyncio.Future[None]]]) -> None:
        """One pipeline per node: each job's keys carry its partition's tag (keys.Partition.job_id)."""
        by_part: dict[int, list[_End]] = {}
        for end, _ in batch:
            by_part.setdefault(self.parts.layout.of_job(end[0])[0].index, []).append(end)
        try:
            await asyncio.gather(*(self._send_part(i, ends) for i, ends in by_part.items()))
        finally:
            for _, fut in batch:
                if not fut.done():
                    fut.set_result(None)

    async def _send_part(self, index: int, ends: list[_End]) -> None:
        part = self.parts.parts[index]
        gone: list[str] = []
        done: list[str] = []
        results: list[tuple[str, bytes]] = []
        for job_id, finished, result in ends:
            gone.append(in_progress_key_prefix + job_id)
            if finished:
                done.append(job_id)
                gone += (retry_key_prefix + job_id, job_key_prefix + job_id)
                if result is not None and self.keep_result_ms > 0:
                    results.append((result_key_prefix + job_id, result))

        commands: list[tuple[Any, ...]] = [("SET", k, v, "PX", self.keep_result_ms) for k, v in results]
        if done:
            commands.append(("ZREM", part.queue, *done))
        commands.append(("DEL", *gone))

        async def send(c: Any) -> None:
            for reply in await pipelined(c, commands):
                if isinstance(reply, Exception):
                    raise reply

        for attempt in range(1, self.tries + 1):
            try:
                await self.parts.call(part, send, deadline_s=10.0)
                self.batches += 1
                return
            except (RedisError, OSError) as exc:
                # What is left behind is harmless: job ids are never reused, the job key
                # expires, and the reconciler decides from the run hash, not from these keys.
                if attempt == self.tries:
                    log.warning("could not clear %d finished jobs' arq keys: %s", len(ends), exc)
                else:
                    await asyncio.sleep(self.retry_s)

    async def aclose(self) -> None:
        if self.sending:
            await asyncio.gather(*self.sending, return_exceptions=True)
