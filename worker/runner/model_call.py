"""One model call as an effect: wait for capacity, stream, coalesce deltas into buffered events,
assemble the reply, and hand the outcome to the machine (``ModelReplied`` or ``ModelFailed``).
Also the summary call compaction may ask for."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, Any

import orjson
from pydantic import ValidationError

from shared.models import EventKind, Message, ToolCall
from worker import context, policy
from worker.limiter import limited
from worker.machine import (
    Compact,
    CompactionDone,
    ModelFailed,
    ModelReplied,
    ModelRequest,
    ModelStreamOpened,
    identify,
    notices,
)
from worker.models.base import ModelCallError, ReasoningDelta, StreamEnd, TextDelta, ToolCallDelta
from worker.policy import ModelFailure
from worker.ports import Capacity

if TYPE_CHECKING:
    from worker.runner.driver import RunDriver

__all__ = ["SUMMARY_PROMPT", "FlushDeltas", "call_model", "flush_deltas", "summarise"]

log = logging.getLogger("agentmill.runner")

SUMMARY_PROMPT = (
    "Summarise the conversation below for your own later use: keep the user's goal, decisions, facts, "
    "numbers and tool results that still matter; drop chatter. Plain text, at most 300 words."
)


class FlushDeltas:
    """Put in the run's inbox when buffered deltas are due out: the driver publishes them when it
    next looks, unless the model's outcome is queued behind by then. A reply whose last deltas
    arrive in the same event-loop turn as its end (a short answer, a final burst) then publishes
    them with its own commit: one write instead of two."""


async def call_model(d: RunDriver, req: ModelRequest) -> None:
    obs = d.host.observer
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    ttft: float | None = None
    d.delta_seq = 0
    d.delta_published = False
    d.outcome_queued = False
    d.last_flush = t0
    text: list[str] = []
    calls: dict[int, dict[str, str]] = {}
    end = StreamEnd()  # a provider that stops without a StreamEnd said nothing about the ending
    held: Capacity | None = None
    if d.host.lease is not None:
        d.host.lease.check("a model call")
    flush_s = d.host.settings.delta_flush_ms / 1000.0
    try:
        provider = d.ports.models.provider(d.host.profile(d.state.cfg.agent))
        held = await _capacity(d, req)
        t0 = d.last_flush = loop.time()  # the call starts once it has capacity
        # aclosing: a cancel that lands outside the generator (e.g. while flushing deltas) must
        # still close the provider's HTTP stream at once, not when the generator is collected.
        async with contextlib.aclosing(provider.stream(req, d.hints)) as chunks:
            async for chunk in chunks:
                if ttft is None:
                    ttft = loop.time() - t0
                    d.inbox.put_nowait(ModelStreamOpened(d.clock.now_ms()))
                if isinstance(chunk, TextDelta):
                    text.append(chunk.text)
                    _delta(d, req, {"text": chunk.text})
                elif isinstance(chunk, ReasoningDelta):  # shown to readers, not part of the answer
                    _delta(d, req, {"reasoning": chunk.text})
                elif isinstance(chunk, ToolCallDelta):
                    slot = calls.setdefault(chunk.index, {"id": "", "name": "", "arguments": ""})
                    slot["id"] = slot["id"] or (chunk.id or "")
                    slot["name"] = slot["name"] or (chunk.name or "")
                    slot["arguments"] += chunk.arguments
                    _delta(d, req, {"toolCall": {"index": chunk.index, "id": chunk.id, "name": chunk.name,
                                                 "arguments": chunk.arguments}})  # fmt: skip
                elif isinstance(chunk, StreamEnd):
                    end = chunk
                if loop.time() - d.last_flush >= flush_s and not d.flush_queued:
                    d.flush_queued = True
                    d.last_flush = loop.time()
                    d.inbox.put_nowait(FlushDeltas())
    except ModelCallError as exc:
        _drop_unpublished_deltas(d)
        await _throttled(d, exc.failure)
        obs.model_call("error", latency_s=loop.time() - t0, ttft_s=ttft)
        _failed(d, exc.failure)
        return
    except asyncio.CancelledError:
        _drop_unpublished_deltas(d)
        raise
    except Exception as exc:  # a provider bug must fail the run with a reason, not hang it
        log.exception("run %s: provider crashed", d.run_id)
        _drop_unpublished_deltas(d)
        obs.model_call("error", latency_s=loop.time() - t0, ttft_s=ttft)
        _failed(d, ModelFailure(kind="internal", message=f"{type(exc).__name__}: {exc}"))
        return
    finally:
        if held is not None:
            u = end.usage
            await held.release(u.input_tokens + u.output_tokens if u is not None else None)
    try:
        msg = _assemble(req, text, calls)
    except ValidationError as exc:  # over a bound (content, arguments, names): not retried
        obs.model_call("error", latency_s=loop.time() - t0, ttft_s=ttft)
        detail = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()[:3])
        _failed(
            d, ModelFailure(kind="invalid", message=f"the model's reply is not a valid message: {detail}")
        )
        return
    # A stream that stopped without a finish_reason is no answer: the machine retries it.
    outcome = "success" if end.finish_reason is not None else "error"
    obs.model_call(outcome, latency_s=loop.time() - t0, ttft_s=ttft)
    if end.usage is not None:
        obs.tokens_used(input_tokens=end.usage.input_tokens, output_tokens=end.usage.output_tokens)
    if end.finish_reason is None:
        _drop_unpublished_deltas(d)
    # Deltas still buffered go out with the commit of this outcome, before its events: readers see
    # them as they would have from a flush.
    partial = d.delta_published or _has_deltas(d)
    d.outcome_queued = True
    d.inbox.put_nowait(
        ModelReplied(d.clock.now_ms(), msg, end.usage, end.finish_reason, d.ports.rng.random(), partial)
    )


def _assemble(req: ModelRequest, text: list[str], calls: dict[int, dict[str, str]]) -> Message:
    """The reply from its fragments, its calls named by agentmill (``identify``: the provider's ids
    are kept for the wire only); raises ValidationError when a part is over its bound."""
    tool_calls = [
        ToolCall(
            id=c["id"] or f"call_{req.model_call_index}_{i}",
            name=c["name"] or "unknown",
            arguments=c["arguments"] or "{}",
        )
        for i, c in sorted(calls.items())
    ]
    reply = Message(role="assistant", content="".join(text), tool_calls=tool_calls or None)
    return identify(reply, req.model_call_index, req.messages)


def _failed(d: RunDriver, failure: ModelFailure) -> None:
    d.outcome_queued = True
    d.inbox.put_nowait(
        ModelFailed(d.clock.now_ms(), failure, d.ports.rng.random(), partial=d.delta_published)
    )


async def _capacity(d: RunDriver, req: ModelRequest) -> Capacity | None:
    """Wait for pool-wide capacity of the profile's provider (worker/limiter.py); None: unlimited."""
    pcfg = d.host.profile(d.state.cfg.agent).provider
    if not limited(pcfg):
        return None
    t0 = d.clock.monotonic()

    async def on_wait(reason: str, hint_ms: int) -> None:
        d.host.observer.throttled(reason)
        d.out.emit(notices.capacity_wait(req, reason, hint_ms))
        await d.out.publish_now()

    held = await d.ports.models.hold(pcfg, policy.request_tokens(req.messages, pcfg.max_tokens), on_wait)
    if pcfg.max_concurrent or pcfg.requests_per_minute or pcfg.tokens_per_minute:
        d.host.observer.capacity_waited(d.clock.monotonic() - t0)
    return held


async def _throttled(d: RunDriver, f: ModelFailure) -> None:
    """A 429: counted; with Retry-After, no worker calls that endpoint until it has passed."""
    if f.status != 429:
        return
    d.host.observer.throttled("http_429")
    pcfg = d.host.profile(d.state.cfg.agent).provider
    if f.retry_after_ms and limited(pcfg):
        await d.ports.models.pause(pcfg, min(f.retry_after_ms, d.state.cfg.retry.retry_after_cap_ms))


def _delta(d: RunDriver, req: ModelRequest, body: dict[str, Any]) -> None:
    """Coalesce: consecutive text (or reasoning) fragments merge into one buffered model_delta event."""
    field = "text" if "text" in body else "reasoning" if "reasoning" in body else None
    if d.out.buffer and field is not None:
        kind, ts, raw = d.out.buffer[-1]
        last = orjson.loads(raw)
        if (
            kind == EventKind.MODEL_DELTA.value
            and field in last
            and len(last[field]) < d.host.settings.delta_flush_chars
        ):
            last[field] += body[field]
            d.out.buffer[-1] = (kind, ts, orjson.dumps(last))
            return
    d.delta_seq += 1
    d.out.emit(notices.model_delta(req, d.delta_seq, body))


async def flush_deltas(d: RunDriver) -> None:
    """The driver's answer to ``FlushDeltas``: publish the buffered deltas now, unless the model's
    outcome is already queued (its commit takes them)."""
    d.flush_queued = False
    if d.outcome_queued:
        return
    if _has_deltas(d):
        d.delta_published = True
    await d.out.publish_now()


def _has_deltas(d: RunDriver) -> bool:
    return any(k == EventKind.MODEL_DELTA.value for k, _, _ in d.out.buffer)


def _drop_unpublished_deltas(d: RunDriver) -> None:
    d.out.buffer = [e for e in d.out.buffer if e[0] != EventKind.MODEL_DELTA.value]


async def summarise(d: RunDriver, c: Compact) -> None:
    """Compaction by a model call of the profile; a failed summary falls back to truncation."""
    parts = context.split_for_compaction(c.transcript, c.keep_recent)
    summary: str | None = None
    if parts is not None:
        _, middle, _ = parts
        s = d.state
        req = ModelRequest(
            run_id=d.run_id,
            session_id=s.session_id,
            messages=[
                Message(role="system", content=SUMMARY_PROMPT),
                *middle,
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
            provider = d.ports.models.provider(d.host.profile(s.cfg.agent))
            text: list[str] = []
            ended = False
            held = await _capacity(d, req)
            try:
                async with contextlib.aclosing(provider.stream(req, d.hints)) as chunks:
                    async for ch in chunks:
                        if isinstance(ch, TextDelta):
                            text.append(ch.text)
                        ended = ended or (isinstance(ch, StreamEnd) and ch.finish_reason is not None)
            finally:
                if held is not None:
                    await held.release(None)
            summary = ("".join(text).strip() or None) if ended else None  # a cut-off summary is none
        except ModelCallError as exc:
            log.warning("run %s: summary call failed (%s); truncating instead", d.run_id, exc)
    new, removed = context.compact(c.transcript, c.keep_recent, summary)
    d.inbox.put_nowait(CompactionDone(d.clock.now_ms(), new, removed, c.reason))
