"""Steps the handlers share: the next model call (limits, compaction), the request, the run's ending.

The run's ending is built here only: ``finish`` sets the terminal phase, the closing events and the
``Finish`` command with ``result_of`` the state.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import orjson

from agentmill_client import limits
from agentmill_client.codec import to_jsonable
from agentmill_client.models import EventKind, Message, RunError, RunResult, RunStatus
from shared.model_copies import built, copied
from worker.core import policy, preamble
from worker.core.config import RunConfig
from worker.machine.budget import spent_with_children, unaffordable
from worker.machine.commands import CallModel, Command, Compact, Decision, Emit, Finish, ModelRequest
from worker.machine.state import AnyPhase, CallPhase, Phase, RunState
from worker.machine.window import windowed_history

__all__ = [
    "FINAL_ANSWER_PROMPT",
    "approval_emit",
    "bounded_messages",
    "build_messages",
    "build_messages_for_call",
    "error_event",
    "finish",
    "result_of",
]


def up(state: RunState, **changes: Any) -> RunState:
    """``state.model_copy(update=changes)``, without its generic path (deep copies, extras, private
    attributes: RunState has none): the machine copies its state about ten times a run, and this is
    a third of model_copy's cost. Like model_copy, the changes are not validated."""
    return copied(state, **changes)


def status_event(status: str, **extra: Any) -> Emit:
    return Emit(EventKind.STATUS, {"status": status, **extra})


def approval_emit(
    call_id: str, name: str, decision: str, reason: str | None, actor: dict[str, Any] | None
) -> Emit:
    """The ``approval`` event: a human's decision on a call, with its reason and who decided."""
    payload: dict[str, Any] = {"toolCallId": call_id, "name": name, "decision": decision}
    if reason:
        payload["reason"] = reason
    if actor:
        payload["actor"] = actor
    return Emit(EventKind.APPROVAL, payload)


def agent_of(config: RunConfig) -> dict[str, Any]:
    """What the run's opening and closing events say of its agent: its name and, for a tenant's
    agent, the version it is pinned to."""
    if config.agent_version is None:
        return {"agent": config.agent}
    return {"agent": config.agent, "agentVersion": config.agent_version}


def error_event(scope: str, code: str, message: str, **extra: Any) -> Emit:
    """The seed's ``error`` RunEvent: scope model | tool | run, a stable code, a message."""
    return Emit(EventKind.ERROR, {"scope": scope, "code": code, "message": message[:2000], **extra})


def duration_error(s: RunState) -> RunError:
    limit = s.config.max_run_duration_ms if s.config is not None else None
    return RunError(code="max_run_duration", message=f"loopLimits.maxRunDurationMs={limit} reached")


def over_time(s: RunState, now_ms: int) -> RunError | None:
    limit = s.cfg.max_run_duration_ms
    if limit is not None and now_ms - s.started_at_ms >= limit:
        return duration_error(s)
    return None


def next_model_call(s: RunState, now_ms: int, cmds: list[Command]) -> Decision:
    """Check the loop limits and compaction threshold, then ask the model."""
    cfg = s.cfg
    if (err := over_time(s, now_ms)) is not None:
        return finish(s, RunStatus.FAILED, cmds, error=err)
    if s.iterations >= cfg.max_iterations and not s.final_call:  # (a repair of the final answer)
        text = f"loopLimits.maxIterations={cfg.max_iterations} reached"
        if cfg.on_limit == "fail":
            return finish(s, RunStatus.FAILED, cmds, error=RunError(code="max_iterations", message=text))
        return final_call(s, now_ms, cmds, "max_iterations")
    if s.tool_calls_used >= cfg.max_tool_calls and not s.final_call and s.tool_rounds:
        text = f"loopLimits.maxToolCalls={cfg.max_tool_calls} reached"
        if cfg.on_limit == "fail":
            return finish(s, RunStatus.FAILED, cmds, error=RunError(code="max_tool_calls", message=text))
        return final_call(s, now_ms, cmds, "max_tool_calls")
    comp = cfg.compaction
    if (
        len(s.transcript) > comp.max_messages
        or policy.estimate_tokens(s.transcript) > comp.max_estimated_tokens
    ):
        return compact(s, cmds, "threshold")
    return call_model(s, now_ms, cmds)


def call_model(s: RunState, now_ms: int, cmds: list[Command]) -> Decision:
    """Ask the model, if the run's budget affords the call's worst case; else end budget_exceeded."""
    if s.cfg.budget is not None:  # (without one, nothing to afford: its messages not built twice)
        total = spent_with_children(s)
        spent = total.input_tokens + total.output_tokens
        if (err := unaffordable(s.cfg, spent, total.cost_usd, _messages_of(s))) is not None:
            return finish(s, RunStatus.FAILED, cmds, error=err)
    s = up(
        s,
        phase=Phase.MODEL_RUNNING,
        call=CallPhase.CALLING,
        model_call_index=s.model_call_index + 1,
        attempt=0,
        provider_index=0,  # each call starts on the primary (worker/machine/fallback.py)
        called_llm_at_ms=now_ms,
    )
    return s, [*cmds, CallModel(request_of(s))]


def final_call(s: RunState, now_ms: int, cmds: list[Command], limit: str) -> Decision:
    """A loop limit was reached with onLimit=answer: one last model call, without tools."""
    s = up(s, final_call=limit)
    return call_model(s, now_ms, [*cmds, status_event("limit_reached", limit=limit, action="final_answer")])


FINAL_ANSWER_PROMPT = (
    "The run has reached its limit ({limit}). Tools are no longer available. Using what you have "
    "found so far, give your final answer now."
)


def compact(s: RunState, cmds: list[Command], reason: str) -> Decision:
    s = up(s, phase=Phase.COMPACTING, call=CallPhase.NONE)
    return s, [
        *cmds,
        status_event("compacting", reason=reason),
        Compact(list(s.transcript), s.cfg.compaction.keep_recent, reason),
    ]


def build_messages(s: RunState) -> list[Message]:
    """System prompt + reduced past run loops + the current run loop in full; while a
    preamble is on, each tool result framed as data (worker/core/preamble.py)."""
    transcript = s.transcript if s.cfg.preamble is None else preamble.framed(s.transcript)
    return [system_message(s.cfg.system_prompt), *windowed_history(s), *transcript]


@lru_cache(maxsize=256)
def system_message(prompt: str) -> Message:
    """The system prompt as a message (frozen: one per prompt, not one validated per model call)."""
    return Message(role="system", content=prompt)


def build_messages_for_call(s: RunState) -> list[Message]:
    """What the next model call sends: the messages, and the final-answer prompt on a final call."""
    return _messages_of(s)


def _messages_of(s: RunState) -> list[Message]:
    messages = build_messages(s)
    if s.final_call:
        messages.append(Message(role="user", content=FINAL_ANSWER_PROMPT.format(limit=s.final_call)))
    return messages


def request_of(s: RunState) -> ModelRequest:
    cfg = s.cfg
    messages = _messages_of(s)
    at = s.provider_index
    bound, out = policy.prompt_bound(messages), cfg.link_reserve(at)
    # The tenant's day budget holds an upper bound its text cannot game (not budget.maxTokens'
    # estimate), at the worst-case prices of the provider the call is on: settlement replaces it
    # with the provider's count at its cache-aware prices.
    pricing = cfg.link_pricing(at)
    cost = pricing.worst_case_usd(bound, out) if pricing is not None else None
    return ModelRequest(
        run_id=s.run_id,
        session_id=s.session_id,
        messages=messages,
        tools=[] if s.final_call else [*cfg.tools, *cfg.internal_tools],
        model_call_index=s.model_call_index,
        attempt=s.attempt,
        failures=s.failures,
        iterations=s.iterations,
        response_format=cfg.response_format,
        reserve_tokens=bound + out,
        reserve_cost_usd=cost,
        provider_index=at,
    )


# The machine's endings (a phase each); the status a result reports for each phase (others: running).
_ENDINGS = {status: status for status in (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.ABORTED)}
_PARKED = (RunStatus.AWAITING_HUMAN, RunStatus.AWAITING_TOOLS, RunStatus.AWAITING_CHILDREN)
_STATUS_OF: dict[AnyPhase, RunStatus] = {p: p for p in (*_ENDINGS, *_PARKED)}
_STATUS_OF[Phase.IDLE] = RunStatus.QUEUED


def finish(
    s: RunState,
    status: RunStatus,
    cmds: list[Command],
    *,
    final: Message | None = None,
    error: RunError | None = None,
    actor: dict[str, Any] | None = None,
) -> Decision:
    """The run's ending: its status event (naming ``actor``, who ended it, when given) and Finish."""
    phase = _ENDINGS[status]
    s = up(s, phase=phase, call=CallPhase.NONE, final_message=final, last_error=error, running=[])
    result = result_of(s)
    payload: dict[str, Any] = {"status": status._value_, "iterations": s.iterations}
    if result.stop_reason:
        payload["stopReason"] = result.stop_reason
    if final is not None and s.finish_reason is not None:
        payload["finishReason"] = s.finish_reason
    if error is not None:
        payload["error"] = error.model_dump(by_alias=True)
    if s.config is not None and s.config.agent_version is not None:
        payload["agentVersion"] = s.config.agent_version
    if actor:
        payload["actor"] = actor
    if error is not None and status == RunStatus.FAILED:
        cmds = [*cmds, error_event("run", error.code, error.message, retryable=error.retryable)]
    return s, [*cmds, Emit(EventKind.STATUS, payload), Finish(result)]


def bounded_messages(transcript: list[Message]) -> tuple[list[Message], int]:
    """The newest messages within limits.MAX_RESULT_MESSAGES and MAX_RESULT_MESSAGES_BYTES (their
    JSON together), and how many older ones were left out."""
    kept: list[Message] = []
    size = 0
    for m in reversed(transcript):
        size += len(orjson.dumps(to_jsonable(m)))
        if len(kept) >= limits.MAX_RESULT_MESSAGES or size > limits.MAX_RESULT_MESSAGES_BYTES:
            break
        kept.append(m)
    return kept[::-1], len(transcript) - len(kept)


def result_of(s: RunState) -> RunResult:
    """The run's result from its state (its values validated as the state's: not validated again)."""
    status = _STATUS_OF.get(s.phase, RunStatus.RUNNING)
    messages, omitted = (
        bounded_messages(s.transcript) if s.config and s.config.include_messages else (None, None)
    )
    return built(
        RunResult,
        session_id=s.session_id,
        run_id=s.run_id,
        status=status,
        final_assistant_message=s.final_message,
        last_error=s.last_error,
        usage=s.usage,
        children_usage=s.children_usage,
        iterations=s.iterations,
        stop_reason=s.final_call if s.phase == RunStatus.COMPLETED else None,
        finish_reason=s.finish_reason,
        output=s.output if s.phase == RunStatus.COMPLETED else None,
        messages=messages,
        messages_omitted=omitted,
    )
