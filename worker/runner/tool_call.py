"""One tool call as an effect: execute it (through the ToolPort, or recall through the SessionStore)
and report its result with the record the next commit writes (``ToolRecorded``: the driver applies
the machine's ``ToolFinished`` step and commits the record with it). A call whose result is already
recorded never gets here: the machine serves it on ``Resumed``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from agentmill_client.models import ToolCall, ToolResult
from shared.tool_records import ToolRecord
from worker.core.config import RECALL_TOOL
from worker.core.history_tools import SEARCH_HISTORY, candidates, search
from worker.core.tool_retry import ToolRetry
from worker.machine import RunState, ToolFinished, notices
from worker.runner.effect import EffectContext, ToolRecorded
from worker.telemetry import tracing
from worker.tools.base import ToolContext

__all__ = ["run_tool"]


async def run_tool(cx: EffectContext, state: RunState, call: ToolCall) -> None:
    obs = cx.host.observer
    rec = cx.records.get(call.id)  # a claim without a result (a recorded result is served by the machine)
    attempts = rec.attempts + 1 if rec is not None else 1
    if rec is not None:
        # Claimed by a worker that died before recording a result: run it again, same key.
        obs.tool_reexecuted(call.name)
        cx.out.emit(notices.tool_reexecuted(call, attempts))
    t0 = cx.clock.monotonic()
    store = cx.ports.store
    ctx = ToolContext(cx.run_id, state.session_id, call.id, f"{cx.run_id}:{call.id}", 1,
                      dict(state.cfg.runtime_init_data), fencing_token=store.epoch)  # fmt: skip
    cx.check_lease(f"tool call {call.name}")
    with tracing.tool_span(call.name, call.id, attempt=attempts, arguments=call.arguments) as span:
        if call.name == RECALL_TOOL:
            result = await cx.ports.sessions.recall(state.session_id, call, cx.run_id)
        elif call.name == SEARCH_HISTORY:
            result = await _search(cx, state, call)
        else:

            async def on_retry(r: ToolRetry) -> None:
                obs.tool_retry(r.call.name)
                cx.out.emit(*notices.tool_attempt_failed(r.call, r.attempt, r.reason))
                tracing.event(span, "agentmill.tool.retry",
                              {"agentmill.retry.attempt": r.attempt, "agentmill.retry.reason": r.reason})  # fmt: skip

            result = await _execute(cx, state, call, ctx, on_retry)
        tracing.tool_done(span, is_error=result.is_error, content=result.content)
    outcome = "cached" if result.cached else "error" if result.is_error else "ok"
    obs.tool_call(call.name, outcome, duration_s=cx.clock.monotonic() - t0)
    cx.host.failpoints.hit("after_tool_effect")
    record = ToolRecord.finished(store.epoch, attempts, result, state.round_called_at_ms)
    cx.post(ToolRecorded(ToolFinished(cx.now_ms(), result), record, record.to_json()))


async def _execute(
    cx: EffectContext,
    state: RunState,
    call: ToolCall,
    ctx: ToolContext,
    on_retry: Callable[[ToolRetry], Awaitable[None]],
) -> ToolResult:
    """Through the ToolPort, or from the tool-result cache when the profile caches this tool."""
    profile = cx.profile(state)
    cache, ttl = cx.ports.cache, profile.cache_ttl_s(call.name)
    if cache is None or ttl is None:
        return await cx.ports.tools.execute(profile, call, ctx, on_retry)
    if (hit := await cache.get(call)) is not None:
        return hit
    result = await cx.ports.tools.execute(profile, call, ctx, on_retry)
    await cache.put(call, result, ttl)
    return result


async def _search(cx: EffectContext, state: RunState, call: ToolCall) -> ToolResult:
    """search_history: the session's past turns (as many as the run may load), its past runs'
    calls, and this run's own results no longer in its conversation, ranked by the pure ``search``."""
    ctx = state.cfg.context
    loops, calls, past = await cx.ports.sessions.load_past(state.session_id, ctx.loaded_loops())
    shown = {m.tool_call_id for m in state.transcript if m.role == "tool"}
    own = [r for i, rec in sorted(cx.records.items()) if i not in shown and (r := rec.recorded) is not None]
    return search(call, candidates(loops, past, own, calls), ctx.search_max_results)
