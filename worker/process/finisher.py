"""arq's per-job bookkeeping at the end of a job: written by the run's ending commit when the run ends
with its job (``JobEnding``), else for every job ending in one event-loop turn at once (``JobFinisher``).

arq finishes each job with its own MULTI (delete the job, retry and in-progress keys, drop the job
from the queue and the abort set, store the result). At a thousand runs in flight those
transactions, and the Python that builds them, are a large part of a worker's CPU. The jobs that end
in one loop turn share one round trip per node here (``Partitions.sending``): per partition one DEL and one ZREM for
all of them, one SET per stored result. The keys and the result record are arq's, so arq's ``Job.status()`` and
``Job.result()`` read them as before. A job's task waits until its keys are gone, as with arq.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from arq.constants import (
    in_progress_key_prefix,
    job_key_prefix,
    result_key_prefix,
    retry_key_prefix,
)
from arq.jobs import serialize_result
from arq.utils import timestamp_ms

from shared.dispatch import RUN_FUNCTION
from shared.partitions import Partitions
from worker.core.commit_step import JobEnd

log = logging.getLogger("agentmill.worker")

# (job id, finished, result record or None): an unfinished job (cancelled at shutdown) gives back
# only its in-progress key; its job key stays, as arq leaves it, for the reconciler's checks.
_End = tuple[str, bool, bytes | None]


class JobEnding:
    """A claimed job's end: arq's result record, and its finish handed to the run's ending commit
    (``RunPorts.job_end``): a run that ends as its job ends (a terminal status, nothing owed to other
    runs) has its job's keys cleared and its result stored by that commit, not by a round trip of
    the finisher's after it (and a worker that dies in between leaves no job behind). Any other
    end of the job (parked, handed back, fenced, failed, or returning other than what the commit
    wrote) is finished by ``JobFinisher`` as before."""

    __slots__ = ("end", "job_id", "keep_ms", "queue", "run", "score", "serializer", "start_ms")

    def __init__(self, job_id: str, run: tuple[str, int], score: int, queue: str,
                 serializer: Callable[[dict[str, Any]], bytes] | None, keep_ms: int) -> None:  # fmt: skip
        self.job_id, self.run, self.score, self.queue = job_id, run, score, queue
        self.serializer, self.keep_ms = serializer, keep_ms
        self.start_ms = timestamp_ms()
        self.end: JobEnd | None = None

    def record(self, success: bool, result: Any) -> bytes | None:
        """arq's result record of the job ending now (None: none kept)."""
        if self.keep_ms <= 0:
            return None
        return serialize_result(
            RUN_FUNCTION, self.run, {}, 1, self.score, success, result, self.start_ms, timestamp_ms(),
            f"{self.job_id}:{RUN_FUNCTION}", self.queue, job_id=self.job_id, serializer=self.serializer,
        )  # fmt: skip

    def __call__(self, result: str) -> JobEnd:
        """The finish for the ending commit, the job returning ``result``."""
        self.end = JobEnd(self.job_id, result, self.record(True, result) or b"", self.keep_ms)
        return self.end

    def finished(self, success: bool, result: Any) -> bool:
        """Whether the ending commit finished the job as it ended (acknowledged, with this result)."""
        e = self.end
        return e is not None and e.landed and success and result == e.result


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
        """Every partition's commands through ``Partitions.sending`` (one round trip per node; each
        job's keys carry its partition's tag, keys.Partition.job_id); the partitions whose commands
        failed are sent again, up to ``tries`` times."""
        by_part: dict[int, list[_End]] = {}
        for end, _ in batch:
            by_part.setdefault(self.parts.layout.of_job(end[0])[0].index, []).append(end)
        left = {i: self._commands(i, ends) for i, ends in by_part.items()}
        try:
            for attempt in range(1, self.tries + 1):
                out = self.parts.sending(deadline_s=10.0)
                spans = {
                    i: [out.add(self.parts.parts[i], c) for c in commands] for i, commands in left.items()
                }
                replies = await out.replies()
                self.batches += out.round_trips
                failed = {
                    i: e
                    for i, idx in spans.items()
                    for e in (replies[n] for n in idx)
                    if isinstance(e, Exception)
                }
                left = {i: left[i] for i in failed}
                if not left:
                    return
                if attempt == self.tries:
                    # What is left behind is harmless: job ids are never reused, the job key
                    # expires, and the reconciler decides from the run hash, not from these keys.
                    log.warning(
                        "could not clear finished jobs' arq keys on %d partitions: %s",
                        len(left),
                        next(iter(failed.values())),
                    )
                else:
                    await asyncio.sleep(self.retry_s)
        finally:
            for _, fut in batch:
                if not fut.done():
                    fut.set_result(None)

    def _commands(self, index: int, ends: list[_End]) -> list[tuple[Any, ...]]:
        """arq's end-of-job writes for the jobs of partition ``index``: results, queue, keys."""
        gone: list[str] = []
        done: list[str] = []
        commands: list[tuple[Any, ...]] = []
        for job_id, finished, result in ends:
            gone.append(in_progress_key_prefix + job_id)
            if finished:
                done.append(job_id)
                gone += (retry_key_prefix + job_id, job_key_prefix + job_id)
                if result is not None and self.keep_result_ms > 0:
                    commands.append(("SET", result_key_prefix + job_id, result, "PX", self.keep_result_ms))
        if done:
            commands.append(("ZREM", self.parts.parts[index].queue, *done))
        commands.append(("DEL", *gone))
        return commands

    async def aclose(self) -> None:
        if self.sending:
            await asyncio.gather(*self.sending, return_exceptions=True)
