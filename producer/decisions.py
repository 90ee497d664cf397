"""What a caller decides for a parked run: an approval decision (settle_approval.lua) and a client's
tool results (tool_results.lua), each kept with who sent it (``actor``, shared.actors) for the events
the run publishes of them: the script that resumes the run writes the first (a tool result, an
approval), the run's worker the rest when it takes them up."""

from __future__ import annotations

from collections.abc import Sequence

from agentmill_client.models import ClientToolResult
from shared import keys, payload_crypto
from shared.actors import actor_json
from shared.calls.approvals import SettleApproval
from shared.calls.results import ToolResults
from shared.replies import text
from shared.script_sending import Parts, run_script
from shared.scripts import Scripts

__all__ = ["post_tool_results", "settle_approval"]


async def settle_approval(
    parts: Parts,
    scripts: Scripts,
    part: keys.Partition,
    run_id: str,
    tool_call_id: str,
    *,
    approved: bool,
    reason: str | None,
    tenant: str | None,
    actor: dict[str, str] | None,
) -> str:
    """Record one approval decision; the last one re-enqueues the run. Returns the script verdict."""
    decision = "approved" if approved else "rejected"
    sealed = "1" if payload_crypto.active().on else ""  # a reason in its event is the worker's to seal
    who = actor_json(actor)
    call = SettleApproval(run_id, tool_call_id, decision, reason or "", tenant or "", who, sealed)
    k, a = scripts.framing.frame(part, call.keys(part), call.argv())
    return SettleApproval.verdict(await run_script(parts, scripts.settle_approval, part, k, a)).value


async def post_tool_results(
    parts: Parts,
    scripts: Scripts,
    part: keys.Partition,
    run_id: str,
    results: Sequence[ClientToolResult],
    *,
    tenant: str | None,
    actor: dict[str, str] | None,
) -> tuple[str, str, list[str]]:
    """Record results of client tool calls, all or none. Returns (verdict, toolCallId, per-result
    verdicts): recorded | resumed (the run went back on the queue), each result recorded | duplicate;
    or unknown_run | finished | unknown_call | not_client | conflict | timed_out naming the call."""
    codec = payload_crypto.active()  # a client's results are stored sealed as a worker's are
    flat = tuple(
        v
        for r in results
        for v in (r.tool_call_id, codec.seal_str(r.content, same=True), "1" if r.is_error else "")
    )
    call = ToolResults(run_id, tenant or "", actor_json(actor), len(results), flat)
    k, a = scripts.framing.frame(part, call.keys(part), call.argv())
    reply = await run_script(parts, scripts.tool_results, part, k, a)
    verdict = ToolResults.verdict(reply).value
    if verdict in ("recorded", "resumed"):
        return verdict, "", [text(v) for v in reply[1:]]
    return verdict, text(reply[1]) if len(reply) > 1 else "", []
