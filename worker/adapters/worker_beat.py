"""A worker's heartbeat and the dropping of a worker's lease entries, on every partition: one script
per partition, pipelined per node."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from shared.calls.steps import Beat as BeatCall
from shared.calls.steps import BeatVerdict
from shared.calls.workers import ForgetWorker
from shared.functions import each_with_reload
from shared.keys import Partition
from shared.partitions import Partitions
from shared.scripts import Scripts, text

__all__ = ["Beat", "beat", "forget_worker"]


@dataclass(frozen=True, slots=True)
class Beat:
    """A heartbeat's answer: ``lost`` if the lease had already expired (not renewed); else the number
    of live workers (this one included) and the abort requests waiting in the worker's inbox as
    (runId, epoch, reason)."""

    lost: bool
    workers: int = 1
    aborts: list[tuple[str, int, str]] = field(default_factory=list)


async def beat(
    parts: Partitions[Any],
    scripts: Scripts,
    lease_id: str,
    lease_ms: int,
    *,
    register: bool = False,
    max_messages: int = 200,
) -> Beat:
    """One worker heartbeat: one script per partition, one pipelined round trip per node, whatever
    the number of runs the worker holds. Lost on any partition is lost (the worker starts over)."""

    def queue(pipe: Any, part: Partition) -> None:
        call = BeatCall(lease_id, lease_ms, max_messages, "1" if register else "")
        k, a = scripts.frame(part, call.keys(part), call.argv())
        scripts.beat.queue(pipe, k, a)

    # Bounded: a beat stuck on a dead master would keep the worker from seeing its lease run out.
    replies = await each_with_reload(parts, scripts.beat, queue, deadline_s=max(0.5, lease_ms / 3000.0))
    aborts: list[tuple[str, int, str]] = []
    workers = 1
    for (r,) in replies:
        if BeatCall.verdict(r) == BeatVerdict.LOST:
            return Beat(lost=True)
        workers = max(workers, int(r[1]))
        aborts += [(text(r[i]), int(text(r[i + 1]) or 0), text(r[i + 2])) for i in range(2, len(r), 3)]
    return Beat(lost=False, workers=workers, aborts=aborts)


async def forget_worker(
    parts: Partitions[Any], scripts: Scripts, lease_id: str, *, only_if_expired: bool
) -> str:
    """Drop a worker's lease entries (and its runs sets and inboxes where the set is empty): the
    verdict of the partition furthest from forgotten (has_runs, alive, gone, forgotten)."""

    def queue(pipe: Any, part: Partition) -> None:
        call = ForgetWorker(lease_id, "1" if only_if_expired else "")
        k, a = scripts.frame(part, call.keys(part), call.argv())
        scripts.forget_worker.queue(pipe, k, a)

    verdicts = {
        ForgetWorker.verdict(r).value for (r,) in await each_with_reload(parts, scripts.forget_worker, queue)
    }
    for v in ("has_runs", "alive", "forgotten"):
        if v in verdicts:
            return v
    return "gone"
