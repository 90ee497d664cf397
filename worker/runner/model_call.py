"""One model call as an effect: wait for capacity, stream, coalesce deltas into buffered events,
assemble the reply, and hand the outcome to the machine (``ModelReplied`` or ``ModelFailed``).
Also the summary call compaction may ask for."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from pydantic import ValidationError

from agentmill_client.models import EventKind, Message, ThinkingBlock, Usage
from shared.profiles import AgentProfile
from shared.provider_config import ProviderConfig
from worker.adapters.limiter import limited
from worker.core import context, policy, preamble
from worker.core.compaction import SUMMARY_PROMPT
from worker.core.policy import ModelFailure
from worker.machine import (
    BudgetRefused,
    Compact,
    CompactionDone,
    ModelFailed,
    ModelReplied,
    ModelRequest,
    ModelStreamOpened,
    RunState,
    notices,
)
from worker.models.base import (
    ModelCallError,
    ReasoningDelta,
    StreamEnd,
    TextDelta,
    ThinkingDone,
    ToolCallDelta,
)
from worker.ports import BudgetHold, Capacity
from worker.runner.economy_call import economy_call
from worker.runner.effect import EffectContext, FlushDeltas
from worker.runner.reply import assemble
from worker.telemetry import tracing

__all__ = ["SUMMARY_PROMPT", "ModelStream", "call_model", "summarise"]

log = logging.getLogger("agentmill.runner")


_DELTA = EventKind.MODEL_DELTA.value


class ModelStream:
    """One model call's deltas on their way out: their seq, when they were last flushed, whether
    any went out (a failure after that is partial), whether a flush or the outcome is queued."""

    __slots__ = ("cx", "flush_queued", "last_flush", "max_chars", "outcome_queued", "published", "req", "seq",
                 "span")  # fmt: skip

    def __init__(self, cx: EffectContext, req: ModelRequest, now: float, span: Any = None) -> None:
        self.cx = cx
        self.span = span  # the call's trace span (worker/telemetry/tracing.py); None: traces off
        self.req = req
        self.seq = 0
        self.last_flush = now
        self.published = False
        self.flush_queued = False  # a FlushDeltas is in the inbox
        self.outcome_queued = False  # the call's ModelReplied/ModelFailed is in the inbox
        self.max_chars = cx.host.settings.delta_flush_chars  # a coalesced delta's size before a new one

    def delta(self, body: dict[str, Any]) -> None:
        """Coalesce: consecutive text (or reasoning) fragments merge into one buffered model_delta."""
        field = "text" if "text" in body else "reasoning" if "reasoning" in body else None
        out = self.cx.out
        if field is not None and out.extend_last(_DELTA, field, body[field], self.max_chars):
            return
        self.seq += 1
        out.emit(notices.model_delta(self.req, self.seq, body))

    def flush_due(self, now: float) -> None:
        """Ask the driver for a flush (the caller checks that one is due and none is queued)."""
        self.flush_queued = True
        self.last_flush = now
        self.cx.post(FlushDeltas(self.flush))

    async def flush(self) -> None:
        """The driver's answer to ``FlushDeltas``: publish the buffered deltas now, unless the
        call's outcome is already queued (its commit takes them)."""
        self.flush_queued = False
        if self.outcome_queued:
            return
        if self.cx.out.holds(_DELTA):
            self.published = True
        await self.cx.out.publish_now()

    def drop_unpublished(self) -> None:
        self.cx.out.drop(_DELTA)

    def replied(self, msg: Message, end: StreamEnd, usage: Usage) -> None:
        # Deltas still buffered go out with the commit of this outcome, before its events: readers
        # see them as they would have from a flush.
        cx = self.cx
        partial = self.published or cx.out.holds(_DELTA)
        self.outcome_queued = True
        if self.span is not None:
            tracing.model_replied(self.span, end.finish_reason, usage, msg)
        cx.post(ModelReplied(cx.now_ms(), msg, usage, end.finish_reason, cx.ports.rng.random(), partial))

    def failed(self, failure: ModelFailure) -> None:
        cx = self.cx
        self.outcome_queued = True
        if self.span is not None:
            tracing.model_failed(self.span, failure.kind, failure.message, failure.status)
        cx.post(ModelFailed(cx.now_ms(), failure, cx.ports.rng.random(), partial=self.published))


async def call_model(cx: EffectContext, state: RunState, req: ModelRequest) -> None:
    if not tracing.on():
        return await _call_model(cx, state, req, None)
    try:
        pcfg = _on(cx.profile(state), req)
        provider, model = str(pcfg.kind), pcfg.model_name
    except Exception:  # an unknown profile fails inside the call, as without traces
        provider, model = "", ""
    with tracing.chat_span(provider, model, purpose=req.purpose, index=req.model_call_index,
                           messages=req.messages) as span:  # fmt: skip
        await _call_model(cx, state, req, span)


async def _call_model(cx: EffectContext, state: RunState, req: ModelRequest, span: Any) -> None:
    obs = cx.host.observer
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    ttft: float | None = None
    s = ModelStream(cx, req, t0, span)
    text: list[str] = []
    calls: dict[int, dict[str, str]] = {}
    thinking: list[ThinkingBlock] = []  # blocks a provider needs back (anthropic)
    end = StreamEnd()  # a provider that stops without a StreamEnd said nothing about the ending
    held: Capacity | None = None
    hold: BudgetHold | None = None
    cx.check_lease("a model call")
    pace = cx.host.pace
    streaming = False
    try:
        profile = cx.profile(state)
        at = _at(profile, req)
        pcfg = profile.chain[at]
        if state.cfg.lane == "economy" or cx.ports.budgets.limited(cx.tenant):
            await cx.out.landed()  # a commit sent behind this call (RunDriver.model_commit) in first
        if await economy_call(cx, state, req, profile, at):  # answered from a provider batch, or parked
            return
        provider = cx.ports.models.provider(profile, at)
        if cx.ports.budgets.limited(cx.tenant):
            got = await _reserve(cx, req)
            if isinstance(got, str):  # the tenant's day cannot afford this call: it is not made
                cx.post(BudgetRefused(cx.now_ms(), got))
                return
            hold = got
        held = await _capacity(cx, pcfg, req)
        t0 = s.last_flush = loop.time()  # the call starts once it has capacity
        pace.open += 1
        streaming = True
        # aclosing: a cancel that lands outside the generator (e.g. while flushing deltas) must
        # still close the provider's HTTP stream at once, not when the generator is collected.
        async with contextlib.aclosing(provider.stream(req, cx.hints)) as chunks:
            async for chunk in chunks:
                if ttft is None:
                    ttft = loop.time() - t0
                    cx.post(ModelStreamOpened(cx.now_ms()))
                if isinstance(chunk, TextDelta):
                    text.append(chunk.text)
                    s.delta({"text": chunk.text})
                elif isinstance(chunk, ReasoningDelta):  # shown to readers, not part of the answer
                    s.delta({"reasoning": chunk.text})
                elif isinstance(chunk, ToolCallDelta):
                    slot = calls.setdefault(chunk.index, {"id": "", "name": "", "arguments": ""})
                    slot["id"] = slot["id"] or (chunk.id or "")
                    slot["name"] = slot["name"] or (chunk.name or "")
                    slot["arguments"] += chunk.arguments
                    s.delta({"toolCall": {"index": chunk.index, "id": chunk.id, "name": chunk.name,
                                          "arguments": chunk.arguments}})  # fmt: skip
                elif isinstance(chunk, ThinkingDone):
                    thinking.append(chunk.block)
                elif isinstance(chunk, StreamEnd):
                    end = chunk
                if loop.time() - s.last_flush >= pace.interval_s() and not s.flush_queued:
                    s.flush_due(loop.time())
    except ModelCallError as exc:
        s.drop_unpublished()
        if hold is not None:
            await hold.settle(0, None)  # a failed call: its usage is unknown, its hold released
        await _throttled(cx, state, pcfg, exc.failure)
        obs.model_call("error", latency_s=loop.time() - t0, ttft_s=ttft)
        s.failed(exc.failure)
        return
    except asyncio.CancelledError:
        s.drop_unpublished()
        if hold is not None:  # an abort or the drain's timeout: the hold goes now, not at its expiry
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(asyncio.shield(hold.settle(0, None)), 2.0)
        raise
    except Exception as exc:  # a provider bug must fail the run with a reason, not hang it
        log.exception("run %s: provider crashed", cx.run_id)
        s.drop_unpublished()
        if hold is not None:
            await hold.settle(0, None)
        obs.model_call("error", latency_s=loop.time() - t0, ttft_s=ttft)
        s.failed(ModelFailure(kind="internal", message=f"{type(exc).__name__}: {exc}"))
        return
    finally:
        if streaming:
            pace.open -= 1
        if held is not None:
            u = end.usage
            await held.release(u.input_tokens + u.output_tokens if u is not None else None)
    u = end.usage
    try:
        msg = assemble(req, text, calls, thinking)
    except ValidationError as exc:  # over a bound (content, arguments, names): not retried
        if hold is not None:
            if u is None:
                await hold.settle(0, None)
            else:  # the provider's count, at its prices
                paid = policy.call_usage(
                    u, req.messages, Message(role="assistant"), profile.provider.prices()
                )
                await hold.settle(paid.input_tokens + paid.output_tokens, paid.cost_usd)
        obs.model_call("error", latency_s=loop.time() - t0, ttft_s=ttft)
        detail = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()[:3])
        s.failed(ModelFailure(kind="invalid", message=f"the model's reply is not a valid message: {detail}"))
        return
    # A stream that stopped without a finish_reason is no answer: the machine retries it.
    outcome = "success" if end.finish_reason is not None else "error"
    obs.model_call(outcome, latency_s=loop.time() - t0, ttft_s=ttft)
    # Usage and cost are the call's, at the prices of the model that answered (a fallback's own).
    usage = policy.call_usage(end.usage, req.messages, msg, pcfg.prices())
    obs.tokens_used(usage, agent=profile.name, model=pcfg.model_name)
    if hold is not None:
        spent = usage.input_tokens + usage.output_tokens
        # In the run's slot, the settlement is written by the commit of this reply (no round trip of
        # its own; a worker dying before that commit leaves the hold to expire). Elsewhere it is
        # settled before that commit (a worker dying between them: the call counts, and so does its
        # repetition by the next worker: both were made).
        if hold.slot == cx.ports.store.slot:
            cx.settle = hold.settlement(spent, usage.cost_usd)
        else:
            await hold.settle(spent, usage.cost_usd)
    if end.finish_reason is None:
        s.drop_unpublished()
    s.replied(msg, end, usage)


async def _reserve(cx: EffectContext, req: ModelRequest) -> BudgetHold | str:
    """Hold the call's worst case on its tenant's day budget (worker/adapters/budgets.py); a str: refused.
    The failpoint ``after_budget_reserve`` kills the worker between the hold and its settlement."""
    hold_id = f"{cx.run_id}.{req.model_call_index}.{req.attempt}.{cx.ports.rng.random():.9f}"[:200]
    got = await cx.ports.budgets.reserve(cx.tenant, hold_id, req.reserve_tokens, req.reserve_cost_usd)
    if not isinstance(got, str):
        cx.host.failpoints.hit("after_budget_reserve")
    return got


def _at(profile: AgentProfile, req: ModelRequest) -> int:
    """The place in the profile's chain of the provider the call is on (the machine chose it:
    req.provider_index; the last one if the profile's chain has since been shortened)."""
    return min(req.provider_index, len(profile.chain) - 1)


def _on(profile: AgentProfile, req: ModelRequest) -> ProviderConfig:
    return profile.chain[_at(profile, req)]


async def _capacity(cx: EffectContext, pcfg: ProviderConfig, req: ModelRequest) -> Capacity | None:
    """Wait for pool-wide capacity of the call's provider (worker/adapters/limiter.py: each endpoint
    counted apart, so a fallback's calls count against the fallback's limits); None: unlimited."""
    if not limited(pcfg):
        return None
    obs = cx.host.observer
    t0 = cx.clock.monotonic()

    async def on_wait(reason: str, hint_ms: int) -> None:
        obs.throttled(reason)
        cx.out.emit(notices.capacity_wait(req, reason, hint_ms))
        await cx.out.publish_now()

    held = await cx.ports.models.hold(
        pcfg, policy.request_tokens(req.messages, pcfg.max_tokens), on_wait, cx.priority
    )
    if pcfg.max_concurrent or pcfg.requests_per_minute or pcfg.tokens_per_minute:
        obs.capacity_waited(cx.clock.monotonic() - t0)
    return held


async def _throttled(cx: EffectContext, state: RunState, pcfg: ProviderConfig, f: ModelFailure) -> None:
    """A 429: counted; with Retry-After, no worker calls that endpoint until it has passed."""
    if f.status != 429:
        return
    cx.host.observer.throttled("http_429")
    if f.retry_after_ms and limited(pcfg):
        await cx.ports.models.pause(pcfg, min(f.retry_after_ms, state.cfg.retry.retry_after_cap_ms))


async def summarise(cx: EffectContext, s: RunState, c: Compact, prompt: str = SUMMARY_PROMPT) -> None:
    """Compaction by a model call of the profile with ``prompt`` (summary, keyFacts: compaction.py);
    a failed summary falls back to truncation."""
    parts = context.split_for_compaction(c.transcript, c.keep_recent)
    summary: str | None = None
    if parts is not None:
        _, middle, _ = parts
        req = ModelRequest(
            run_id=cx.run_id,
            session_id=s.session_id,
            messages=[
                Message(role="system", content=preamble.with_preamble(s.cfg.preamble, prompt)),
                *(middle if s.cfg.preamble is None else preamble.framed(middle)),
                Message(role="user", content="Write the summary now."),
            ],
            tools=[],
            model_call_index=s.model_call_index,
            attempt=0,
            failures=s.failures,
            iterations=s.iterations,
            purpose="summary",
        )
        try:
            provider = cx.ports.models.provider(cx.profile(s))
            text: list[str] = []
            ended = False
            held = await _capacity(cx, cx.profile(s).provider, req)
            try:
                async with contextlib.aclosing(provider.stream(req, cx.hints)) as chunks:
                    async for ch in chunks:
                        if isinstance(ch, TextDelta):
                            text.append(ch.text)
                        ended = ended or (isinstance(ch, StreamEnd) and ch.finish_reason is not None)
            finally:
                if held is not None:
                    await held.release(None)
            summary = ("".join(text).strip() or None) if ended else None  # a cut-off summary is none
        except ModelCallError as exc:
            log.warning("run %s: summary call failed (%s); truncating instead", cx.run_id, exc)
    new, removed = context.compact(c.transcript, c.keep_recent, summary)
    cx.post(CompactionDone(cx.now_ms(), new, removed, c.reason))
