"""A run's ending: its result, session update and usage tally in one terminal commit, the run
counted as finished, and what the ending owes other runs (a child's result to its parent, an abort
to a parent's children) handed off at once."""

from __future__ import annotations

import asyncio
import logging

from agentmill_client.codec import encode
from agentmill_client.models import RunResult
from shared.calls.results import ChildResultVerdict
from worker.core.commit_step import Outbox
from worker.core.sessions import session_update
from worker.machine import RunState
from worker.runner.effect import EffectContext
from worker.runner.parking import ending_error
from worker.runner.tally import usage_tally

__all__ = ["end"]

log = logging.getLogger("agentmill.runner")


async def end(
    fx: EffectContext,
    state: RunState,
    outbox: Outbox,
    result: RunResult,
    started_mono: float,
    *,
    hand_off: bool,
) -> None:
    """``hand_off``: the run is a child, or has children (its ending owes them)."""
    now, status = fx.now_ms(), result.status._value_  # (an enum's .value: two Python calls)
    session = session_update(state, result, fx.records, now)
    days = fx.host.settings.usage_retention_days
    # The job's finish with it, unless the ending owes other runs: the job ends after their hand-off.
    fold = fx.ports.job_end is not None and result.status.terminal and not hand_off
    job = fx.ports.job_end(status) if fx.ports.job_end is not None and fold else None
    await fx.out.step(
        state,
        outbox,
        status=status,
        aux=encode(result),
        session=session,
        error_code=ending_error(result),
        tally=usage_tally(state, result, fx.tenant, now, days),
        job_end=job,
    )
    if job is not None:
        job.landed = True
    fx.host.observer.run_finished(status, iterations=result.iterations,
                                  duration_s=fx.clock.monotonic() - started_mono)  # fmt: skip
    if hand_off:
        await _hand_off(fx)


async def _hand_off(fx: EffectContext) -> None:
    """Done now; if it fails, the reconciler does it (the ending marked it)."""
    try:
        done = await asyncio.wait_for(fx.ports.store.hand_off(), 10.0)
    except Exception as exc:
        log.warning("run %s: handing its ending off failed (the reconciler retries): %s", fx.run_id, exc)
        return
    if done.get("deliver") in (ChildResultVerdict.RECORDED, ChildResultVerdict.RESUMED):
        fx.host.observer.children_ended(1)
