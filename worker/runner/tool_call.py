"""One tool call as an effect: execute it (through the ToolPort, or recall through the SessionStore)
and record the result, which the next commit writes with the machine's ``ToolFinished`` step. A call
whose result is already recorded never gets here: the machine serves it on ``Resumed``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from shared.models import ToolCall
from shared.tool_records import ToolRecord
from worker import failpoints
from worker.config import RECALL_TOOL
from worker.machine import ToolFinished, notices
from worker.tools.base import ToolContext
from worker.tools.registry import ToolRetry

if TYPE_CHECKING:
    from worker.runner.driver import RunDriver

__all__ = ["run_tool"]


async def run_tool(d: RunDriver, call: ToolCall) -> None:
    obs = d.host.observer
    rec = d.records.get(call.id)  # a claim without a result (a recorded result is served by the machine)
    attempts = rec.attempts + 1 if rec is not None else 1
    if rec is not None:
        # Claimed by a worker that died before recording a result: run it again, same key.
        obs.tool_reexecuted(call.name)
        d.out.emit(notices.tool_reexecuted(call, attempts))
    t0 = d.clock.monotonic()
    ctx = ToolContext(d.run_id, d.state.session_id, call.id, f"{d.run_id}:{call.id}", 1,
                      d.state.cfg.runtime_init_data, fencing_token=d.store.epoch)  # fmt: skip
    if d.host.lease is not None:
        d.host.lease.check(f"tool call {call.name}")
    if call.name == RECALL_TOOL:
        result = await d.ports.sessions.recall(d.state.session_id, call, d.run_id)
    else:

        async def on_retry(r: ToolRetry) -> None:
            obs.tool_retry(r.call.name)
            d.out.emit(*notices.tool_attempt_failed(r.call, r.attempt, r.reason))

        result = await d.ports.tools.execute(d.host.profile(d.state.cfg.agent), call, ctx, on_retry)
    obs.tool_call(call.name, "error" if result.is_error else "ok", duration_s=d.clock.monotonic() - t0)
    failpoints.hit("after_tool_effect")
    record = ToolRecord.finished(d.store.epoch, attempts, result)
    d.done_records[call.id] = record.to_json()
    d.records[call.id] = record
    d.inbox.put_nowait(ToolFinished(d.clock.now_ms(), result))
