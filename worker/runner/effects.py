"""Starting the effects the machine asks for: each is a coroutine the driver runs as its task
(``RunDriver.spawn``), given the run's ``EffectContext`` and the state that asked for it, and feeds
its outcome back through the run's inbox; the ones that need no I/O are answered inline."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from worker.core import compaction
from worker.machine import (
    CallModel,
    Command,
    Compact,
    CompactionDone,
    ContextLoaded,
    Event,
    ExecuteTool,
    LoadContext,
    RetryTimerFired,
    RunState,
    StartChildren,
    Wait,
)
from worker.runner.children import start_children
from worker.runner.effect import EffectContext
from worker.runner.model_call import call_model, summarise
from worker.runner.tool_call import run_tool

__all__ = ["model_only", "start"]


def start(cx: EffectContext, state: RunState, c: Command) -> Coroutine[Any, Any, None] | Event:
    """The effect to run for ``c``, or its outcome at once when it needs no I/O."""
    if isinstance(c, LoadContext):
        if c.session_id is None:  # nothing to read: no task, no trip through the inbox
            return ContextLoaded(cx.now_ms(), [])
        return _load_context(cx, state, c)
    if isinstance(c, CallModel):
        return call_model(cx, state, c.request)
    if isinstance(c, Wait):
        return _wait(cx, c.delay_ms)
    if isinstance(c, ExecuteTool):
        return run_tool(cx, state, c.call)
    if isinstance(c, StartChildren):
        return start_children(cx, state, c)
    if isinstance(c, Compact):
        comp = state.cfg.compaction
        if (prompt := compaction.summary_prompt(comp)) is not None:
            return summarise(cx, state, c, prompt)
        new, removed = compaction.without_model(
            c.transcript, c.keep_recent, comp, state.cfg.approval_tools, c.reason
        )
        return CompactionDone(cx.now_ms(), new, removed, c.reason)
    raise TypeError(f"unknown command {c!r}")  # pragma: no cover - the machine emits nothing else


async def _load_context(cx: EffectContext, state: RunState, c: LoadContext) -> None:
    ctx = state.cfg.context  # with the context tools, every past turn the run may widen its window to
    history = await cx.ports.sessions.load_history(
        c.session_id, ctx.model_copy(update={"max_run_loops": ctx.loaded_loops()})
    )
    cx.post(ContextLoaded(cx.now_ms(), history))


async def _wait(cx: EffectContext, delay_ms: int) -> None:
    await asyncio.sleep(delay_ms / 1000.0)
    cx.post(RetryTimerFired(cx.now_ms()))


def model_only(effects: list[Command]) -> bool:
    """Effects that may start before their step's commit is acknowledged (RunDriver.model_commit):
    a model call, and a context load with nothing to load (answered inline)."""
    return bool(effects) and all(
        isinstance(c, CallModel) or (isinstance(c, LoadContext) and c.session_id is None) for c in effects
    )
