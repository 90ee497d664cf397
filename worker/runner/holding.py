"""When a step's writes may wait for the next commit (``Commits.hold``), and the timer that bounds
the wait.

A model reply whose tool calls are all declared ``sideEffects: false`` need not be written before
they run: a crash before its commit asks the model again and runs those calls again, which the
declaration allows. Held, the reply goes out with the calls' results in one commit, or alone once
``AGENTMILL_STEP_HOLD_MS`` has passed (a tailer waits at most that for it). A step that starts
anything else commits what was held first, so every other effect still starts after its commit.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from shared.profiles import ToolSettings
from worker.machine import Command, ExecuteTool

__all__ = ["FlushHeld", "StepHold"]


class FlushHeld:
    """Posted to the run's inbox when held steps are due out."""


class StepHold:
    __slots__ = ("_post", "_timer", "hold_s")

    def __init__(self, hold_ms: int, post: Callable[[FlushHeld], None]) -> None:
        self.hold_s = hold_ms / 1000.0
        self._post = post
        self._timer: asyncio.TimerHandle | None = None

    def allows(
        self,
        effects: list[Command],
        settings: Callable[[str], ToolSettings],
        *,
        holding: bool,
        draining: bool,
    ) -> bool:
        """Whether a step may be held: it starts only calls declared without side effects, or it
        starts nothing while earlier steps are held (another result of the round)."""
        if self.hold_s <= 0 or draining:
            return False
        if not effects:
            return holding
        return all(
            isinstance(c, ExecuteTool) and settings(c.call.name).side_effects is False for c in effects
        )

    def arm(self) -> None:
        """The first step held: what is held goes out ``hold_s`` from now at the latest."""
        if self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self.hold_s, self._post, FlushHeld())

    def disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
