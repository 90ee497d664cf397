"""Traces off by default at no cost, and the trace context a run stores (shared/trace_context.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from shared import trace_context
from worker.telemetry import tracing

ROOT = Path(__file__).resolve().parents[2]
TP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_a_valid_traceparent_is_stored_with_its_tracestate() -> None:
    assert trace_context.stored(TP) == TP
    assert trace_context.stored(TP.upper(), " a=1,b=2 ") == f"{TP}\na=1,b=2"
    assert trace_context.headers(f"{TP}\na=1") == {"traceparent": TP, "tracestate": "a=1"}
    assert trace_context.headers(TP) == {"traceparent": TP} and trace_context.headers("") == {}


def test_a_malformed_traceparent_is_ignored() -> None:
    for bad in (None, "", "garbage", TP[:-1], f"ff{TP[2:]}", TP.replace("4bf92f3577b34da6a3ce929d0e0e4736", "0" * 32),
                TP.replace("00f067aa0ba902b7", "0" * 16), TP + "-extra"):  # fmt: skip
        assert trace_context.stored(bad, "a=1") == ""
    assert trace_context.stored(TP, "x" * (trace_context.MAX_TRACESTATE_CHARS + 1)) == TP  # state dropped


def test_the_standard_variables_decide_whether_traces_are_on() -> None:
    assert not tracing.wanted({})
    assert tracing.wanted({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"})
    assert tracing.wanted({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"})
    assert not tracing.wanted({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c", "OTEL_SDK_DISABLED": "true"})
    assert not tracing.wanted({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c", "OTEL_TRACES_EXPORTER": "none"})


def test_off_the_worker_never_imports_the_sdk() -> None:
    """A worker process without an endpoint: everything a run touches imported, a configure call,
    and still no opentelemetry SDK or exporter module loaded."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    code = (
        "import sys, worker.process.jobs, worker.runner.driver, worker.models.openai, worker.tools.http\n"
        "from worker.telemetry import tracing\n"
        "assert not tracing.configure(content=False, instance_id='w') and not tracing.on()\n"
        "print(sorted(m for m in sys.modules if m.startswith(('opentelemetry.sdk', 'opentelemetry.exporter'))))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"
    env["OTEL_EXPORTER_OTLP_ENDPOINT"] = "http://127.0.0.1:9"
    on = code.replace(
        "assert not tracing.configure(content=False, instance_id='w') and not tracing.on()",
        "assert tracing.configure(content=False, instance_id='w') and tracing.on()",
    )
    out = subprocess.run([sys.executable, "-c", on], cwd=ROOT, env=env,
                         capture_output=True, text=True, check=True)  # fmt: skip
    assert "opentelemetry.sdk.trace" in out.stdout  # the same check sees the SDK when it is on


def test_the_client_sends_the_callers_current_context() -> None:
    from opentelemetry.sdk.trace import TracerProvider

    from agentmill_client import _wire as wire

    assert "traceparent" not in wire.trace_headers({"Idempotency-Key": "k"})  # no span: nothing
    provider = TracerProvider()
    with provider.get_tracer("caller").start_as_current_span("request") as span:
        h = wire.trace_headers({"Idempotency-Key": "k"})
    ctx = span.get_span_context()
    assert h["Idempotency-Key"] == "k" and h["traceparent"].startswith(
        f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-"
    )
    assert trace_context.stored(h["traceparent"]) == h["traceparent"]  # what the API keeps of it


def test_a_model_calls_span_carries_its_cache_reads_and_writes() -> None:
    """OpenTelemetry's GenAI attributes: the input counts the whole prompt, cache reads and writes
    are its parts (absent when the provider reported none)."""
    from agentmill_client.models import Message, Usage

    class Span:
        def __init__(self) -> None:
            self.attrs: dict[str, object] = {}

        def set_attribute(self, key: str, value: object) -> None:
            self.attrs[key] = value

    span = Span()
    usage = Usage(input_tokens=1200, output_tokens=30, cache_read_tokens=1000, cache_write_tokens=150)
    tracing.model_replied(span, "stop", usage, Message(role="assistant", content="ok"))
    assert span.attrs["gen_ai.usage.input_tokens"] == 1200 and span.attrs["gen_ai.usage.output_tokens"] == 30
    assert span.attrs["gen_ai.usage.cache_read.input_tokens"] == 1000
    assert span.attrs["gen_ai.usage.cache_creation.input_tokens"] == 150
    plain = Span()
    tracing.model_replied(plain, "stop", Usage(input_tokens=5), Message(role="assistant", content="ok"))
    assert not any("cache" in k for k in plain.attrs)
