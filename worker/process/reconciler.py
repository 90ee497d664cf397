"""The sweep that finds runs nobody is carrying and puts them back on the queue (or ends them).

Two sources, on every partition. Every queued or waiting run has an entry in the partition's live
index scored with the time someone should look at it (a queued run whose job was never claimed, a
claimed run never acquired, an approval timeout). A running run is carried by its worker's lease
(its lease key and its ``workers`` entry on the partition): when a worker's lease expires, the
sweep re-dispatches every run in its runs set, counting the loss in the run (a run that lost its
worker AGENTMILL_MAX_RUN_CRASHES times ends failed, poison_run). Each worker sweeps every few
seconds; the per-run script re-checks under Redis time and bumps the dispatch number, so two
sweeping workers never dispatch a run twice (nor count its loss twice).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

from shared import children
from shared.calls.dispatch import Redispatch, RedispatchVerdict
from shared.calls.results import ChildResultVerdict
from shared.calls.runs import Release
from shared.clock import now_ms
from shared.fields import RunField
from shared.keys import Partition
from shared.partitions import Partitions
from shared.scripts import Scripts, text
from shared.settings import Settings
from worker.adapters.worker_beat import forget_worker

__all__ = ["hand_back_unheld", "reconcile_once", "reconcile_worker", "runs_of"]


async def reconcile_once(
    parts: Partitions[Any], scripts: Scripts, settings: Settings, *, limit: int = 200
) -> Counter[str]:
    """One sweep of every partition: how many runs got each verdict (redispatched, alive, …; a
    redispatched run counts under ``redispatched:<reason>`` too).
    The dead workers and the due runs of all partitions are read in one round trip per node."""
    verdicts: Counter[str] = Counter()
    now = now_ms()

    def due(pipe: Any, part: Partition) -> None:
        pipe.zrangebyscore(part.workers, "-inf", now, start=0, num=20)
        pipe.zrangebyscore(part.live, "-inf", now, start=0, num=limit)

    dead: set[str] = set()
    for part, (workers, runs) in zip(parts.parts, await parts.each(due), strict=True):
        dead.update(text(w) for w in workers)
        if runs:
            verdicts += await _redispatch(parts, scripts, settings, part, [text(r) for r in runs])
    for w in sorted(dead):
        verdicts += await reconcile_worker(parts, scripts, settings, w)
    return verdicts


async def reconcile_worker(
    parts: Partitions[Any], scripts: Scripts, settings: Settings, lease_id: str, *, expired_only: bool = True
) -> Counter[str]:
    """Re-dispatch the runs of a worker whose lease expired (or, ``expired_only=False``, that gave
    its lease up), then forget the worker once it holds none."""
    verdicts: Counter[str] = Counter()
    if not expired_only:
        await forget_worker(parts, scripts, lease_id, only_if_expired=False)
    for part in parts.parts:
        for _ in range(100):  # a worker holds at most max_jobs runs; each pass takes up to 500
            members = await parts.call(part, _members(part.worker_runs(lease_id)))
            if not members:
                break
            got = await _redispatch(
                parts, scripts, settings, part, [text(r) for r in members], dead_worker=lease_id
            )
            verdicts += got
            if got.get("alive") or got.get("error"):  # renewed after all, or Redis trouble: next sweep
                return verdicts
    if await forget_worker(parts, scripts, lease_id, only_if_expired=expired_only) == "forgotten":
        verdicts["worker_expired"] += 1
    return verdicts


def _members(key: str) -> Callable[[Any], Awaitable[Any]]:
    return lambda c: c.srandmember(key, 500)


async def _redispatch(
    parts: Partitions[Any],
    scripts: Scripts,
    settings: Settings,
    part: Partition,
    run_ids: list[str],
    *,
    dead_worker: str = "",
) -> Counter[str]:
    async def send(c: Any) -> list[Any]:
        async with c.pipeline(transaction=False) as pipe:
            for rid in run_ids:
                pipe.hget(part.run(rid), RunField.GEN)
            gens = await pipe.execute()
        async with c.pipeline(transaction=False) as pipe:
            for rid, g in zip(run_ids, gens, strict=True):
                if g is None:
                    pipe.zrem(part.live, rid)
                    if dead_worker:
                        pipe.srem(part.worker_runs(dead_worker), rid)
                    continue
                gen = int(g)
                call = Redispatch(rid, gen, part.job_id(rid, gen), dead_worker)
                k, a = scripts.frame(part, call.keys(part), call.argv())
                await scripts.redispatch(keys=k, args=a, client=pipe)
            return list(await pipe.execute(raise_on_error=False))

    verdicts: Counter[str] = Counter()
    owed: list[str] = []
    for rid, r in zip(run_ids, await parts.call(part, send), strict=True):
        if isinstance(r, Exception):
            verdicts["error"] += 1
        elif isinstance(r, list):
            verdict = Redispatch.verdict(r)
            verdicts[verdict] += 1
            if verdict is RedispatchVerdict.REDISPATCHED:  # and why: the worker metric counts retries by it
                verdicts[f"{verdict}:{text(r[1])}"] += 1
            elif verdict is RedispatchVerdict.ENDING_OWED:
                owed.append(rid)
    for rid in owed:  # ended runs whose ending still owes their parent or children (shared/children.py)
        try:
            done = await children.hand_off(parts, scripts, part, rid)
        except Exception:
            verdicts["handoff_error"] += 1
            continue
        if done.get("deliver") in (ChildResultVerdict.RECORDED, ChildResultVerdict.RESUMED):
            verdicts["child_delivered"] += 1
    return verdicts


async def runs_of(parts: Partitions[Any], lease_id: str) -> list[tuple[Partition, str]]:
    """The runs Redis holds under ``lease_id`` (its runs set on each partition): one round trip a node."""
    sets = await parts.each(lambda pipe, part: pipe.smembers(part.worker_runs(lease_id)))
    return [(part, text(r)) for part, (members,) in zip(parts.parts, sets, strict=True) for r in members]


async def hand_back_unheld(
    parts: Partitions[Any], scripts: Scripts, lease_id: str, runs: list[tuple[Partition, str]]
) -> Counter[str]:
    """Hand back runs Redis holds under ``lease_id`` that no job of its worker drives, each at the
    epoch and dispatch it is at and only while it still runs under that lease id (release.lua's
    lost hand-back, a lost attempt): verdicts counted as ``unheld:<verdict>``."""
    verdicts: Counter[str] = Counter()
    for part, rid in runs:
        epoch, gen = await parts.call(part, _fields(part.run(rid)))
        if epoch is None or gen is None:
            continue
        call = Release(int(epoch), rid, int(gen) + 1, lease_id)
        k, a = scripts.frame(part, call.keys(part), call.argv())
        r = await parts.call(part, _script(scripts.release, k, a))
        verdicts[f"unheld:{Release.verdict(r)}"] += 1
    return verdicts


def _fields(run: str) -> Callable[[Any], Awaitable[Any]]:
    return lambda c: c.hmget(run, RunField.EPOCH, RunField.GEN)


def _script(script: Any, k: list[Any], a: list[Any]) -> Callable[[Any], Awaitable[Any]]:
    return lambda c: script(keys=k, args=a, client=c)
