"""OpenTelemetry traces of the runs a worker drives: an effect concern, off unless configured.

``configure`` starts the official SDK with its OTLP/HTTP exporter only when the standard
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set (and neither
``OTEL_SDK_DISABLED=true`` nor ``OTEL_TRACES_EXPORTER=none``); the exporter, the batch processor and
the resource read every other ``OTEL_*`` variable themselves. Off, nothing of the SDK is imported and
every function here returns at its first test of ``_tracer``: no span, no allocation.

The spans (names and attributes: docs/operations.md#traces), each a child of the one before:

- ``invoke_agent <agent>``: one run attempt (one job), its parent the submitter's span stored with
  the run (shared.trace_context), so every attempt after a crash, a hand-back or a wait joins the
  same trace; a run submitted without one gets a trace id derived from its run id. The machine's
  retries are its events (``agentmill.retry``).
- ``chat <model>`` (gen_ai.operation.name ``chat``) per model call, ``execute_tool <name>`` per tool
  call (its retries as events), ``await_approval`` / ``await_client_tools`` / ``await_children`` per
  wait, drawn when the run resumes from when it parked. A sub-agent's child run continues the trace
  of the parent attempt that made it (``current``).

Message contents (the request's messages, the reply, tool arguments and results) are recorded only
with ``Settings.trace_content`` on. Outbound model, HTTP and MCP tool requests carry ``traceparent``
and ``tracestate`` (``inject``) only with ``Settings.trace_propagation`` ``all``; by default the
trace stays in the pool.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
from collections.abc import Awaitable, Callable, Iterator, Mapping, MutableMapping, Sequence
from typing import Any

import orjson

from shared import trace_context
from worker.core.acquisition import Acquired
from worker.core.store_errors import FencedError, SeqConflictError

__all__ = [
    "WAIT_SPANS",
    "attempt",
    "chat_span",
    "configure",
    "current",
    "event",
    "inject",
    "install",
    "model_failed",
    "model_replied",
    "on",
    "propagate",
    "retried",
    "shutdown",
    "tool_done",
    "tool_span",
    "waited",
    "wanted",
]

_tracer: Any = None  # an opentelemetry Tracer while traces are on; None: off
_provider: Any = None  # the SDK TracerProvider ``configure`` made (shut down by ``shutdown``)
_content = False  # Settings.trace_content
_outbound = False  # Settings.trace_propagation == "all": requests leaving the pool carry the trace

WAIT_SPANS = {
    "awaiting_human": "await_approval",
    "awaiting_tools": "await_client_tools",
    "awaiting_children": "await_children",
    "awaiting_model": "await_batch",
}


def wanted(env: Mapping[str, str] = os.environ) -> bool:
    """Whether the standard variables ask for traces: an OTLP endpoint set, the SDK not disabled."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if env.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() == "none":
        return False
    return bool(env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT"))


def configure(*, content: bool, instance_id: str, env: Mapping[str, str] = os.environ) -> bool:
    """Start the SDK and its OTLP/HTTP exporter when ``wanted``; True when traces are on. The
    service is ``OTEL_SERVICE_NAME`` (else ``agentmill-worker``), ``instance_id`` the worker's id."""
    global _provider
    if not wanted(env):
        return False
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    attrs = {"service.instance.id": instance_id}
    if not env.get("OTEL_SERVICE_NAME"):
        attrs["service.name"] = "agentmill-worker"
    provider = TracerProvider(resource=Resource.create(attrs))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    install(provider, content=content)
    _provider = provider
    return True


def install(provider: Any, *, content: bool = False) -> None:
    """Trace with ``provider`` (an SDK TracerProvider; tests give one with an in-memory exporter);
    None turns traces off."""
    global _tracer, _content
    from agentmill_client import __version__

    _tracer = None if provider is None else provider.get_tracer("agentmill.worker", __version__)
    _content = content


def shutdown() -> None:
    """Export what is still buffered and stop (blocking: run it in a thread at the worker's exit)."""
    global _tracer, _provider
    if _provider is not None:
        _provider.shutdown()
    _tracer = _provider = None


def on() -> bool:
    return _tracer is not None


# ---- the run attempt ----


def _parent(run_id: str, stored: str) -> Any:
    """The context an attempt continues: the submitter's, else one derived from the run id (the
    same for every attempt, so they share a trace)."""
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    if stored:
        ctx = TraceContextTextMapPropagator().extract(trace_context.headers(stored))
        if trace.get_current_span(ctx).get_span_context().is_valid:
            return ctx
    d = hashlib.sha256(run_id.encode()).digest()
    sc = trace.SpanContext(
        trace_id=int.from_bytes(d[:16], "big") or 1,
        span_id=int.from_bytes(d[16:24], "big") or 1,
        is_remote=True,
        trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED),
    )
    return trace.set_span_in_context(trace.NonRecordingSpan(sc))


async def attempt(run_id: str, gen: int, acq: Acquired, run: Callable[[Acquired], Awaitable[str]]) -> str:
    """``run(acq)``, one job of the run, inside its attempt span when traces are on: the span is the
    current one in the job's task (so the effects it starts, their spans and requests, and
    ``waited``/``retried`` find it), a child of the run's stored trace context (``acq.trace``)."""
    if _tracer is None:
        return await run(acq)
    from opentelemetry import context, trace
    from opentelemetry.trace import SpanKind, Status, StatusCode

    try:
        agent = orjson.loads(acq.input).get("agent", "")
    except ValueError:
        agent = ""
    span = _tracer.start_span(
        f"invoke_agent {agent}",
        context=_parent(run_id, acq.trace),
        kind=SpanKind.CONSUMER,
        attributes={
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": agent,
            "agentmill.run.id": run_id,
            "agentmill.run.attempt": gen,  # the dispatch number: one per job
            "agentmill.run.crashes": acq.restarts,  # workers it lost so far
            "agentmill.run.epoch": acq.epoch,
            "agentmill.run.resumed": acq.checkpoint is not None,
        },
    )
    token = context.attach(trace.set_span_in_context(span))
    outcome = "crashed"
    try:
        outcome = await run(acq)
        return outcome
    except (FencedError, SeqConflictError):
        outcome = "fenced"
        raise
    except asyncio.CancelledError:
        outcome = "cancelled"
        raise
    finally:
        span.set_attribute("agentmill.run.outcome", outcome)
        if outcome in ("failed", "cancelled", "crashed"):
            span.set_status(Status(StatusCode.ERROR, outcome))
        span.end()
        context.detach(token)


def _current() -> Any:
    """The recording span current in this task (the job's attempt span in the driver), else None."""
    from opentelemetry import trace

    span = trace.get_current_span()
    return span if span.is_recording() else None


def event(span: Any, name: str, attributes: Mapping[str, Any]) -> None:
    if span is not None:
        span.add_event(name, {k: v for k, v in attributes.items() if v is not None})


def retried(status: Mapping[str, Any]) -> None:
    """A model call the machine retries (its ``retrying`` status event's payload): an event on the
    attempt's span."""
    if _tracer is None or (span := _current()) is None:
        return
    event(span, "agentmill.retry", {"agentmill.retry.reason": str(status.get("reason", "")),
                                    "agentmill.retry.attempt": status.get("attempt"),
                                    "agentmill.retry.delay_ms": status.get("delayMs")})  # fmt: skip


def waited(node: str, since_ms: int, until_ms: int, ended_by: str) -> None:
    """A wait the run spent parked on no worker in ``node`` (from ``since_ms``, when it parked, to
    ``until_ms``), drawn by the attempt that resumed it, as its child."""
    name = WAIT_SPANS.get(node)
    if _tracer is None or name is None or (parent := _current()) is None:
        return
    from opentelemetry import trace

    span = _tracer.start_span(
        name,
        context=trace.set_span_in_context(parent),
        start_time=since_ms * 1_000_000,
        attributes={"agentmill.wait.kind": name.removeprefix("await_"), "agentmill.wait.ended_by": ended_by},
    )
    span.end(end_time=max(since_ms, until_ms) * 1_000_000)


# ---- a model call ----


@contextlib.contextmanager
def chat_span(
    provider: str, model: str, *, purpose: str, index: int, messages: Sequence[Any] = ()
) -> Iterator[Any]:
    """The span of one model call, current while it runs (its HTTP request carries it); yields None
    when off. Results go on it with ``model_replied``/``model_failed``."""
    if _tracer is None:
        yield None
        return
    from opentelemetry.trace import SpanKind

    attrs: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": model,
        "gen_ai.provider.name": provider,
        "gen_ai.system": provider,
        "agentmill.model_call.index": index,
        "agentmill.model_call.purpose": purpose,
    }
    if _content:
        attrs["gen_ai.input.messages"] = _json(messages)
    with _tracer.start_as_current_span(f"chat {model}", kind=SpanKind.CLIENT, attributes=attrs) as span:
        yield span


def model_replied(span: Any, finish_reason: str | None, usage: Any, reply: Any) -> None:
    if span is None:
        return
    span.set_attribute("gen_ai.usage.input_tokens", int(usage.input_tokens))
    span.set_attribute("gen_ai.usage.output_tokens", int(usage.output_tokens))
    # OpenTelemetry's GenAI conventions: the parts of the input read from and written to a prompt cache
    if usage.cache_read_tokens:
        span.set_attribute("gen_ai.usage.cache_read.input_tokens", int(usage.cache_read_tokens))
    if usage.cache_write_tokens:
        span.set_attribute("gen_ai.usage.cache_creation.input_tokens", int(usage.cache_write_tokens))
    if finish_reason is not None:
        span.set_attribute("gen_ai.response.finish_reasons", [finish_reason])
    else:
        _error(span, "no_finish_reason", "the stream ended without a finish_reason")
    if _content:
        span.set_attribute("gen_ai.output.messages", _json([reply]))


def model_failed(span: Any, kind: str, message: str, status: int | None = None) -> None:
    if span is None:
        return
    if status is not None:
        span.set_attribute("http.response.status_code", status)
    _error(span, kind, message)


# ---- a tool call ----


@contextlib.contextmanager
def tool_span(name: str, call_id: str, *, attempt: int, arguments: str = "") -> Iterator[Any]:
    """The span of one tool call, current while it runs; yields None when off."""
    if _tracer is None:
        yield None
        return
    from opentelemetry.trace import SpanKind

    attrs: dict[str, Any] = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": name,
        "gen_ai.tool.call.id": call_id,
        "agentmill.tool.execution": attempt,
    }
    if _content:
        attrs["gen_ai.tool.call.arguments"] = arguments
    with _tracer.start_as_current_span(
        f"execute_tool {name}", kind=SpanKind.INTERNAL, attributes=attrs
    ) as span:
        yield span


def tool_done(span: Any, *, is_error: bool, content: str) -> None:
    if span is None:
        return
    if is_error:
        _error(span, "tool_error", content[:200] if _content else "the tool answered an error")
    if _content:
        span.set_attribute("gen_ai.tool.call.result", content)


# ---- outbound HTTP ----


def current() -> str:
    """The current span's context as a run stores it (shared.trace_context): a sub-agent's child run
    continues its parent's trace from it. '' when off."""
    if _tracer is None:
        return ""
    h: dict[str, str] = {}
    _inject_current(h)
    return trace_context.stored(h.get("traceparent"), h.get("tracestate"))


def propagate(mode: str) -> None:
    """Settings.trace_propagation: only ``all`` lets requests leaving the pool carry the trace."""
    global _outbound
    _outbound = mode == "all"


def inject(headers: MutableMapping[str, str]) -> None:
    """Add the current span's ``traceparent`` (and ``tracestate``, the submitter's) to an outbound
    request's headers, when AGENTMILL_TRACE_PROPAGATION=all; else the trace stays in the pool."""
    if _tracer is None or not _outbound:
        return
    _inject_current(headers)


def _inject_current(headers: MutableMapping[str, str]) -> None:
    from opentelemetry.propagate import inject as _inject

    _inject(headers)


def _error(span: Any, kind: str, message: str) -> None:
    from opentelemetry.trace import Status, StatusCode

    span.set_attribute("error.type", kind)
    span.set_status(Status(StatusCode.ERROR, message))


def _json(value: Any) -> str:
    from agentmill_client.codec import to_jsonable

    return orjson.dumps(to_jsonable(value) if not isinstance(value, list | tuple) else
                        [to_jsonable(v) for v in value]).decode()  # fmt: skip
