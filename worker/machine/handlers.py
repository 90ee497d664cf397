"""The machine's handlers of the run and the model call; the tool round's are in tool_round.py.

Each is pure: (state, event) in, (state, commands) out. table.py says which handler takes which
event in which node, and where it may lead.
"""

from __future__ import annotations

from typing import Any

from agentmill_client.models import EventKind, Message, RunError, RunStatus, Usage
from shared.model_copies import copied
from worker.core import policy
from worker.machine import fallback
from worker.machine.budget import BUDGET_EXCEEDED
from worker.machine.commands import AwaitModel, CallModel, Command, Compact, Decision, Emit, LoadContext, Wait
from worker.machine.events import (
    AbortRequested,
    BudgetRefused,
    CompactionDone,
    ContextLoaded,
    DeadlineReached,
    EffectCrashed,
    ModelDeferred,
    ModelFailed,
    ModelReplied,
    ModelStreamOpened,
    Resumed,
    RetryTimerFired,
    Started,
    StartRejected,
)
from worker.machine.repair import final_answer
from worker.machine.state import CallPhase, Phase, RunState
from worker.machine.steps import (
    agent_of,
    call_model,
    compact,
    duration_error,
    error_event,
    finish,
    next_model_call,
    over_time,
    request_of,
    status_event,
    up,
)
from worker.machine.tool_round import start_round
from worker.machine.window import initial_window, narrow_window, on_overflow

__all__ = [
    "on_abort",
    "on_budget_refused",
    "on_compacted",
    "on_context_loaded",
    "on_crashed",
    "on_deadline",
    "on_failed",
    "on_replied",
    "on_resumed_compacting",
    "on_resumed_model",
    "on_resumed_parked",
    "on_resumed_preparing",
    "on_retry_timer",
    "on_start_rejected",
    "on_started",
    "on_stream_opened",
]

_RUNNING = RunStatus.RUNNING.value  # (an enum's .value, read at every step, is two Python calls)


def on_started(s: RunState, e: Started) -> Decision:
    stamped = [copied(m, created_at=e.now_ms) for m in e.input_messages]
    s = up(s, phase=Phase.PREPARING, config=e.config, transcript=stamped, started_at_ms=e.now_ms)
    return s, [status_event(_RUNNING, **agent_of(e.config)), LoadContext(s.session_id)]


def on_context_loaded(s: RunState, e: ContextLoaded) -> Decision:
    ctx = s.cfg.context
    window = initial_window(e.history, ctx.max_run_loops) if ctx.history_tools else len(e.history)
    return next_model_call(up(s, history=list(e.history), context_window_size=window), e.now_ms, [])


# ---- Resumed: a new job took the run over; its effects are recomputed from the checkpointed state ----


def on_resumed_preparing(s: RunState, e: Resumed) -> Decision:
    return s, [LoadContext(s.session_id)]


def on_resumed_model(s: RunState, e: Resumed) -> Decision:
    """A model call that was cut off (streaming) or waiting to retry starts over."""
    s = up(s, call=CallPhase.CALLING)
    return s, [CallModel(request_of(s))]


def on_resumed_compacting(s: RunState, e: Resumed) -> Decision:
    return s, [Compact(list(s.transcript), s.cfg.compaction.keep_recent, "resume")]


def on_resumed_parked(s: RunState, e: Resumed) -> Decision:
    """awaiting_human, awaiting_tools: nothing to do until the human or the client answers."""
    return s, []


def on_deferred(s: RunState, e: ModelDeferred) -> Decision:
    """The economy lane: the call waits in a provider batch; the run parks on no worker."""
    s = up(s, phase=RunStatus.AWAITING_MODEL, call=CallPhase.NONE)
    wait = AwaitModel(e.custom_id, s.model_call_index, e.switch_at_ms, e.endpoint)
    return s, [status_event(RunStatus.AWAITING_MODEL.value, customId=e.custom_id, lane="economy"), wait]


def on_resumed_awaiting_model(s: RunState, e: Resumed) -> Decision:
    """The batch answered (or the run's economy deadline came): the call is made again, and the
    effect finds the batch's answer with the run, or asks the standard lane."""
    s = up(s, phase=Phase.MODEL_RUNNING, call=CallPhase.CALLING)
    return s, [CallModel(request_of(s))]


def on_stream_opened(s: RunState, e: ModelStreamOpened) -> Decision:
    return up(s, call=CallPhase.STREAMING), []


def on_replied(s: RunState, e: ModelReplied) -> Decision:
    empty = not e.message.content and not e.message.tool_calls
    if (failure := policy.reply_failure(e.finish_reason, empty=empty)) is not None:
        s = up(s, finish_reason=e.finish_reason)
        return on_failed(s, ModelFailed(e.now_ms, failure, e.jitter, e.partial))
    msg = copied(e.message, created_at=e.now_ms)
    refused = len(msg.tool_calls or ()) if s.final_call else 0
    if refused:  # the last call for an answer accepts no tool calls: keep the text only
        msg = Message(role="assistant", content=msg.content, created_at=e.now_ms)
    usage = s.usage + e.usage if e.usage else s.usage
    economy = s.economy_usage
    if e.usage and e.usage.lane == "economy":
        economy = e.usage if economy is None else economy + e.usage
    s = up(s, iterations=s.iterations + 1, usage=usage, transcript=[*s.transcript, msg], attempt=0,
            finish_reason=e.finish_reason, economy_usage=economy)  # fmt: skip
    call_usage = usage_forms(e.usage) if e.usage else None
    cmds: list[Command] = [
        Emit(
            EventKind.ASSISTANT_MESSAGE,
            {
                "message": message_form(msg),
                "modelCallIndex": s.model_call_index,
                "finishReason": e.finish_reason,
                "calledLlmAt": s.called_llm_at_ms,
                **({"usage": call_usage[0]} if call_usage else {}),
            },
        )
    ]
    if call_usage:
        answered = {} if not s.cfg.chain else {"provider": fallback.link_name(s.cfg, s.provider_index),
                                                 "model": s.cfg.chain[s.provider_index].model}  # fmt: skip
        cmds.append(Emit(EventKind.USAGE, {"modelCallIndex": s.model_call_index,
                                           "usage": call_usage[1],
                                           "total": usage_forms(usage)[1],
                                           **answered}))  # fmt: skip
    if refused:
        cmds.append(status_event("tool_calls_refused", count=refused, reason=f"{s.final_call} reached"))
    if not msg.tool_calls:
        return final_answer(s, msg, e.now_ms, cmds)
    return start_round(s, msg, e.now_ms, e.finish_reason, cmds)


def message_form(m: Message) -> dict[str, Any]:
    """A message as its event carries it: ``m.model_dump(mode="json", by_alias=True,
    exclude_none=True)``; a message of text (a string, no calls, no thinking: most replies) read off
    its fields, in their order (no serializer walked at every reply)."""
    d = m.__dict__
    if d["content"].__class__ is not str or d["tool_calls"] is not None or d["thinking_blocks"] is not None:
        return m.model_dump(mode="json", by_alias=True, exclude_none=True)
    out = {"role": d["role"], "content": d["content"]}
    for name, alias in _MESSAGE_TAIL:
        if (v := d[name]) is not None:
            out[alias] = v
    return out


# A message of text's fields after its content (its calls and thinking blocks None), JSON names.
_MESSAGE_TAIL = (("tool_call_id", "toolCallId"), ("name", "name"), ("created_at", "createdAt"))


# Usage's fields and their JSON names: its fields are JSON values as they are (numbers, a bool, a
# str), so its dump is its fields by these names (no serializer walked at every reply).
_USAGE_NAMES = tuple((name, f.alias or name) for name, f in Usage.model_fields.items())


def usage_forms(u: Usage) -> tuple[dict[str, Any], dict[str, Any]]:
    """A call's usage as its events carry it: with its None fields (assistant_message) and in JSON
    form without them (usage): ``u.model_dump(by_alias=True)`` and the same in JSON mode without
    its None fields, read off its fields."""
    d = u.__dict__
    full = {alias: d[name] for name, alias in _USAGE_NAMES}
    return full, {k: v for k, v in full.items() if v is not None}


def on_failed(s: RunState, e: ModelFailed) -> Decision:
    f = e.failure
    cls = policy.classify(f)
    cmds: list[Command] = [
        error_event(
            "model",
            f"model_{f.reason}",
            f.message,
            retryable=cls != "fatal",
            modelCallIndex=s.model_call_index,
            attempt=s.attempt,
            **({"httpStatus": f.status} if f.status is not None else {}),
        )
    ]
    if e.partial:
        cmds.append(
            status_event(
                "model_call_discarded", modelCallIndex=s.model_call_index, attempt=s.attempt, reason=f.reason
            )
        )
    cfg = s.cfg
    if (moved := fallback.next_provider(cfg, s.provider_index, f, s.attempt)) is not None:
        return fallback.move_on(s, e.now_ms, moved[0], moved[1], cmds)
    if cls == "overflow":
        step = on_overflow(s)
        if step == "fail":
            err = RunError(
                code="context_overflow",
                message=f"the context is still too long after compaction: {f.message}",
            )
            return finish(s, RunStatus.FAILED, cmds, error=err)
        if step == "narrow":  # the past turns go before the run does
            s, narrowed = narrow_window(up(s, failures=s.failures + 1))
            if (late := over_time(s, e.now_ms)) is not None:
                return finish(s, RunStatus.FAILED, [*cmds, narrowed], error=late)
            return call_model(s, e.now_ms, [*cmds, narrowed])
        s = up(s, overflow_retries=s.overflow_retries + 1, failures=s.failures + 1)
        return compact(s, cmds, "overflow")
    if cls == "retryable" and s.attempt < cfg.retry.max_retries:
        attempt = s.attempt + 1
        delay = policy.backoff_ms(attempt, cfg.retry, e.jitter, f.retry_after_ms)
        s = up(s, attempt=attempt, failures=s.failures + 1, call=CallPhase.RETRYING)
        cmds.append(
            status_event("retrying", attempt=attempt, delayMs=delay, reason=f.reason, message=f.message)
        )
        cmds.append(Wait(delay))
        return s, cmds
    if cls == "retryable":
        err = RunError(
            code="model_retries_exhausted",
            message=f"model call failed after {s.attempt + 1} attempts: {f.reason}: {f.message}",
            retryable=True,
        )
    else:
        err = RunError(code=f"model_{f.reason}", message=f"model call failed: {f.message}")
    return finish(up(s, failures=s.failures + 1), RunStatus.FAILED, cmds, error=err)


def on_retry_timer(s: RunState, e: RetryTimerFired) -> Decision:
    s = up(s, call=CallPhase.CALLING, called_llm_at_ms=e.now_ms)
    if (err := over_time(s, e.now_ms)) is not None:
        return finish(s, RunStatus.FAILED, [], error=err)
    return s, [CallModel(request_of(s))]


def on_compacted(s: RunState, e: CompactionDone) -> Decision:
    tokens = max(0, policy.estimate_tokens(s.transcript) - policy.estimate_tokens(e.transcript))
    s = up(s, transcript=list(e.transcript), compactions=s.compactions + 1)
    cmds: list[Command] = [
        Emit(
            EventKind.COMPACTION,
            {
                "reason": e.reason,
                "removed": e.removed,
                "messages": len(e.transcript),
                "removedTokens": tokens,
            },
        )
    ]
    if (err := over_time(s, e.now_ms)) is not None:
        return finish(s, RunStatus.FAILED, cmds, error=err)
    return call_model(s, e.now_ms, cmds)


def on_abort(s: RunState, e: AbortRequested) -> Decision:
    return finish(s, RunStatus.ABORTED, [], error=RunError(code="aborted", message=e.reason), actor=e.actor)


def on_budget_refused(s: RunState, e: BudgetRefused) -> Decision:
    """The tenant's day cannot afford the call about to start: the run ends before it."""
    return finish(s, RunStatus.FAILED, [], error=RunError(code=BUDGET_EXCEEDED, message=e.message))


def on_deadline(s: RunState, e: DeadlineReached) -> Decision:
    return finish(s, RunStatus.FAILED, [], error=duration_error(s))


def on_start_rejected(s: RunState, e: StartRejected) -> Decision:
    return finish(s, RunStatus.FAILED, [], error=RunError(code=e.code, message=e.message))


def on_crashed(s: RunState, e: EffectCrashed) -> Decision:
    return finish(s, RunStatus.FAILED, [], error=RunError(code="internal", message=e.message))
