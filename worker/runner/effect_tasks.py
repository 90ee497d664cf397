"""The effects a run has running: each started as a task the run owns, its end watched (a lapsed
lease or a run found gone fences the run, anything else it raised fails the run), and all of them
cancelled and awaited when the run stops. What it learns it posts to the run's inbox."""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

from worker.adapters.lease import LeaseExpiredError
from worker.core.store_errors import FencedError

__all__ = ["Crashed", "EffectTasks", "Wake"]

log = logging.getLogger("agentmill.runner")


class Wake:
    """Put in the inbox to make the loop look at its flags (drain, fence)."""


class Crashed(Wake):
    """An effect raised something it should not have: the run fails with it as lastError."""

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


class Fenced(Protocol):
    """The run's driver, as its effects reach it: ``fence`` stops the run without writing
    (``deleted``: it was deleted)."""

    def fence(self, *, deleted: bool = False) -> None: ...


class EffectTasks:
    """One run's running effects (``tasks``: a drain waits for them)."""

    def __init__(self, run_id: str, post: Callable[[Wake], None], driver: Fenced) -> None:
        self.run_id = run_id
        self.post = post  # the run's inbox
        # The driver, held weakly: the driver holds this, and a strong hold made the driver and all
        # it holds (its state, commits, effects) a cycle, left to the collector when the run ended
        # instead of freed then. The driver outlives its effects (its job awaits them). (A weak
        # reference to the driver, not a WeakMethod of its fence: that cost seven times as much.)
        self._driver = weakref.ref(driver)
        self.tasks: set[asyncio.Task[None]] = set()

    def fence(self, deleted: bool) -> None:
        if (driver := self._driver()) is not None:
            driver.fence(deleted=deleted)

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        exc = None if task.cancelled() else task.exception()
        if isinstance(exc, LeaseExpiredError):
            log.warning("run %s: %s; stopping without writing", self.run_id, exc)
            self.fence(False)
        elif isinstance(exc, FencedError):  # an effect found the run gone (a deleted parent's children)
            log.warning("run %s: %s; stopping without writing", self.run_id, exc)
            self.fence(exc.deleted)
        elif exc is not None:
            log.error("run %s: effect crashed; failing the run", self.run_id, exc_info=exc)
            self.post(Crashed(exc))
            return
        self.post(Wake())

    def cancel(self) -> None:
        for t in list(self.tasks):
            if not t.cancelling():  # a second cancel would interrupt its clean-up (closing an HTTP stream)
                t.cancel()

    async def cancelled(self) -> None:
        """Every running effect cancelled, and awaited. One that has ended already (a model call
        that posted its reply and returned, its ``_done`` not yet run) is not waited for: a gather
        of it costs the run a turn of the loop and changes nothing (``_done`` reads its outcome)."""
        self.cancel()
        tasks = [t for t in self.tasks if not t.done()]
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
