"""A run that stops short of its ending goes back on the queue at once, rather than when its
worker's lease runs out and a reconciler finds it: at a checkpoint (a drain, a stall), after a
refused write that Redis lost (a failover), a cancelled job, or (``lost``, a lost attempt) a stop on
the worker's passed lease deadline or a job that failed. A lost hand-back is taken only while the run
still runs under this worker's lease id at this epoch (release.lua), so a worker that has taken it
since is never undone."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from shared.calls.dispatch import RedispatchReason
from shared.calls.runs import ReleaseVerdict
from worker.ports import RunStore
from worker.runner.commits import Commits
from worker.telemetry.observer import Observer

__all__ = ["hand_back", "released"]

log = logging.getLogger("agentmill.runner")


async def hand_back(
    run_id: str, out: Commits, store: RunStore, gen: int, within_s: float, *, lost: Observer | None = None
) -> None:
    """Best effort, within ``within_s`` for each of its two waits: the commit sent behind answered
    (the release goes after it), then the release. ``lost``: a lost attempt, counted there as the
    sweep counts a lapsed lease's run (runs re-dispatched, ``lease_expired``)."""
    with contextlib.suppress(Exception):
        await asyncio.wait_for(out.landed(), within_s)
    level = logging.INFO if lost is not None else logging.DEBUG
    try:
        verdict = await asyncio.wait_for(asyncio.shield(store.release(gen, lost=lost is not None)), within_s)
    except Exception as exc:  # the lease keeper hands it back, or a reconciler once the lease lapses
        log.log(level, "run %s: not handed back (%s: %s)", run_id, type(exc).__name__, exc)
        return
    log.log(
        level, "run %s handed back%s (%s)", run_id, " as a lost attempt" if lost is not None else "", verdict
    )
    if lost is not None and verdict == ReleaseVerdict.RELEASED:
        lost.runs_redispatched(RedispatchReason.LEASE_EXPIRED)


async def released(run_id: str, out: Commits, store: RunStore, gen: int) -> str:
    """The run back on the queue at its last checkpoint, after the commit sent behind."""
    await out.landed()
    verdict = await store.release(gen)
    log.info("run %s handed back at a checkpoint (%s)", run_id, verdict)
    return "released"
