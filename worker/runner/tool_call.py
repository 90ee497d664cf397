"""One tool call as an effect: execute it (through the ToolPort, or recall through the SessionStore)
and report its result with the record the next commit writes (``ToolRecorded``: the driver applies
the machine's ``ToolFinished`` step and commits the record with it). A call whose result is already
recorded never gets here: the machine serves it on ``Resumed``."""

from __future__ import annotations

from agentmill_client.models import ToolCall
from shared.tool_records import ToolRecord
from worker import failpoints, tracing
from worker.config import RECALL_TOOL
from worker.machine import RunState, ToolFinished, notices
from worker.ports import ToolRetry
from worker.runner.effect import EffectContext, ToolRecorded
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
                      state.cfg.runtime_init_data, fencing_token=store.epoch)  # fmt: skip
    cx.check_lease(f"tool call {call.name}")
    with tracing.tool_span(call.name, call.id, attempt=attempts, arguments=call.arguments) as span:
        if call.name == RECALL_TOOL:
            result = await cx.ports.sessions.recall(state.session_id, call, cx.run_id)
        else:

            async def on_retry(r: ToolRetry) -> None:
                obs.tool_retry(r.call.name)
                cx.out.emit(*notices.tool_attempt_failed(r.call, r.attempt, r.reason))
                tracing.event(span, "agentmill.tool.retry",
                              {"agentmill.retry.attempt": r.attempt, "agentmill.retry.reason": r.reason})  # fmt: skip

            result = await cx.ports.tools.execute(cx.profile(state), call, ctx, on_retry)
        tracing.tool_done(span, is_error=result.is_error, content=result.content)
    obs.tool_call(call.name, "error" if result.is_error else "ok", duration_s=cx.clock.monotonic() - t0)
    failpoints.hit("after_tool_effect")
    record = ToolRecord.finished(store.epoch, attempts, result)
    cx.post(ToolRecorded(ToolFinished(cx.now_ms(), result), record, record.to_json()))
