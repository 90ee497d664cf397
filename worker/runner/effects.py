"""Starting the effects the machine asks for: each runs as a task of the driver (``RunDriver.spawn``)
and feeds its outcome back through the run's inbox; the ones that need no I/O are answered inline."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from worker import context
from worker.machine import (
    CallModel,
    Command,
    Compact,
    CompactionDone,
    ContextLoaded,
    ExecuteTool,
    LoadContext,
    RetryTimerFired,
    Wait,
)
from worker.runner.model_call import call_model, summarise
from worker.runner.tool_call import run_tool

if TYPE_CHECKING:
    from worker.runner.driver import RunDriver

__all__ = ["start"]


def start(d: RunDriver, c: Command) -> None:
    if isinstance(c, LoadContext):
        if c.session_id is None:  # nothing to read: no task, no trip through the inbox
            d.pending.append(ContextLoaded(d.clock.now_ms(), []))
        else:
            d.spawn(_load_context(d, c))
    elif isinstance(c, CallModel):
        d.spawn(call_model(d, c.request))
    elif isinstance(c, Wait):
        d.spawn(_wait(d, c.delay_ms))
    elif isinstance(c, ExecuteTool):
        d.spawn(run_tool(d, c.call))
    elif isinstance(c, Compact):
        if d.state.cfg.compaction.use_model:
            d.spawn(summarise(d, c))
        else:
            new, removed = context.compact(c.transcript, c.keep_recent)
            d.pending.append(CompactionDone(d.clock.now_ms(), new, removed, c.reason))
    else:  # pragma: no cover - the machine emits nothing else
        raise TypeError(f"unknown command {c!r}")


async def _load_context(d: RunDriver, c: LoadContext) -> None:
    history = await d.ports.sessions.load_history(c.session_id, d.state.cfg.context)
    d.inbox.put_nowait(ContextLoaded(d.clock.now_ms(), history))


async def _wait(d: RunDriver, delay_ms: int) -> None:
    await asyncio.sleep(delay_ms / 1000.0)
    d.inbox.put_nowait(RetryTimerFired(d.clock.now_ms()))
