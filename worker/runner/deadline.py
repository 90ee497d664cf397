"""A driven run's ``loopLimits.maxRunDurationMs``: when it ends the run, and the timer that tells the
run's loop (``DeadlineReached`` in its inbox) while a worker drives it. A parked run has no timer:
Redis keeps its deadline (commit.lua's run deadline, the reconciler)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from worker.machine import DeadlineReached, RunState
from worker.ports import Clock

__all__ = ["RunDeadline"]


class RunDeadline:
    def __init__(self, clock: Clock, reached: Callable[[DeadlineReached], None]) -> None:
        self.clock = clock
        self.reached = reached
        self.timer: asyncio.TimerHandle | None = None  # not an effect: a drain does not wait for it

    def at_ms(self, state: RunState) -> int | None:
        """When maxRunDurationMs ends the run (None: no limit)."""
        cfg = state.config
        if cfg is None or cfg.max_run_duration_ms is None:
            return None
        return (state.started_at_ms or self.clock.now_ms()) + cfg.max_run_duration_ms

    def arm(self, state: RunState) -> None:
        """The timer set (again) for ``state``'s deadline; none for a run without one or ended."""
        at = None if state.terminal else self.at_ms(state)
        if at is None:
            return
        self.cancel()
        left_s = max(0.0, (at - self.clock.now_ms()) / 1000.0)
        self.timer = asyncio.get_running_loop().call_later(
            left_s, lambda: self.reached(DeadlineReached(self.clock.now_ms()))
        )

    def cancel(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
