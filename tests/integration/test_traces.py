"""OpenTelemetry traces: a run submitted with a W3C traceparent, through the API and the
Python client, continues the caller's trace in the worker, checked with the SDK's in-memory exporter
(the worker in this process); a worker SIGKILLed mid-run and the one that resumes the run export
to an OTLP/HTTP receiver in this process, and their spans form the same trace."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from redis.asyncio import Redis
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from agentmill_client import AsyncClient
from shared.fields import RunField
from tests.integration.api_support import A, HookServer, api, key, settings
from tests.integration.helpers import producer_for, running_worker, script_run, stream, until_status, wait_all
from tests.support.fake_openai import FakeOpenAI, Reply
from tests.support.otlp_receiver import OtlpReceiver
from tests.support.procs import WorkerProc
from tests.support.schema import K
from worker.telemetry import tracing

if TYPE_CHECKING:
    from tests.support.mcp_server import McpServerProc

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE}-{PARENT}-01"


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    """The worker in this process traces into memory, as the SDK's own tests do."""
    exp = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exp))
    tracing.install(provider)
    try:
        yield exp
    finally:
        tracing.install(None)
        provider.shutdown()


@pytest.fixture
async def gpt(tmp_path: Path) -> AsyncIterator[tuple[FakeOpenAI, Path, list[dict[str, str]]]]:
    """A fake OpenAI-compatible model, an HTTP tool that records its requests' headers, and a
    profile ``gpt`` using both (and echo, flaky)."""
    seen: list[dict[str, str]] = []

    async def lookup(request: Request) -> Response:
        seen.append(dict(request.headers))
        return JSONResponse({"found": True})

    hook = HookServer(lookup, "/lookup")
    fake = FakeOpenAI([])
    path = tmp_path / "profiles.json"
    path.write_bytes(orjson.dumps({"profiles": [{
        "name": "gpt", "provider": {"kind": "openai", "baseUrl": fake.base_url, "model": "fake-1"},
        "tools": ["echo", "flaky"],
        "httpTools": [{"name": "lookup", "url": f"http://127.0.0.1:{hook.port}/lookup", "allowHosts": ["127.0.0.1"]}],
    }]}))  # fmt: skip
    await hook.start()
    try:
        async with fake:
            yield fake, path, seen
    finally:
        await hook.stop()


def by_name(spans: list[ReadableSpan], prefix: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name.startswith(prefix)]


def hexid(n: int, width: int) -> str:
    return format(n, f"0{width}x")


async def test_a_run_continues_the_submitters_trace_with_genai_spans(
    redis: Redis,
    redis_url: str,
    exporter: InMemorySpanExporter,
    gpt: tuple[FakeOpenAI, Path, list[dict[str, str]]],
) -> None:
    fake, path, tool_headers = gpt
    fake.replies += [
        Reply(status=500, error="try again"),  # retried by the machine: an event on the attempt span
        Reply(
            tool_calls=[
                ("echo", {"text": "secret words"}),
                ("flaky", {"failures": 1}),
                ("lookup", {"q": "x"}),
            ]
        ),
        Reply(text="all done"),
    ]
    caller = TracerProvider()
    caller.add_span_processor(SimpleSpanProcessor(exporter))
    s = settings(redis_url, profiles=str(path))
    async with (
        running_worker(redis_url, profiles=str(path), trace_propagation="all"),
        api(s) as url,
        AsyncClient(url, token="tok-a") as c,
    ):
        with caller.get_tracer("caller").start_as_current_span("handle request") as root:
            sub = await c.submit({"agent": "gpt", "inputMessages": [{"role": "user", "content": "hush"}]})
        view = await c.wait(sub.run_id, timeout=30)
    assert view.status == "completed"
    spans = exporter.get_finished_spans()
    trace_id = root.get_span_context().trace_id
    assert {s.context.trace_id for s in spans} == {trace_id}  # one trace, the caller's
    assert [s.context.span_id for s in spans if s.parent is None] == [root.get_span_context().span_id]

    (attempt,) = by_name(spans, "invoke_agent ")
    assert attempt.name == "invoke_agent gpt"
    assert attempt.parent is not None and attempt.parent.span_id == root.get_span_context().span_id
    attrs = dict(attempt.attributes or {})
    assert attrs["gen_ai.operation.name"] == "invoke_agent" and attrs["agentmill.run.id"] == key(sub.run_id)
    assert attrs["agentmill.run.attempt"] == 1 and attrs["agentmill.run.outcome"] == "completed"
    retries = [e for e in attempt.events if e.name == "agentmill.retry"]
    assert len(retries) == 1 and dict(retries[0].attributes or {})["agentmill.retry.attempt"] == 1

    chats = by_name(spans, "chat ")
    assert [c.name for c in chats] == ["chat fake-1"] * 3
    assert all(c.parent is not None and c.parent.span_id == attempt.context.span_id for c in chats)
    for c in chats:
        a = dict(c.attributes or {})
        assert a["gen_ai.operation.name"] == "chat" and a["gen_ai.request.model"] == "fake-1"
        assert a["gen_ai.provider.name"] == "openai" and a["gen_ai.system"] == "openai"
    failed, tools, final = (dict(c.attributes or {}) for c in chats)
    assert failed["error.type"] == "http" and failed["http.response.status_code"] == 500
    assert not chats[0].status.is_ok
    assert tools["gen_ai.response.finish_reasons"] == ("tool_calls",)
    assert final["gen_ai.response.finish_reasons"] == ("stop",)
    assert (final["gen_ai.usage.input_tokens"], final["gen_ai.usage.output_tokens"]) == (11, 5)
    # every model request carried its own call's span as traceparent
    assert [h.get("traceparent", "")[:-3] for h in fake.headers] == [
        f"00-{hexid(trace_id, 32)}-{hexid(c.context.span_id, 16)}" for c in chats
    ]

    tool_spans = {s.name: s for s in by_name(spans, "execute_tool ")}
    assert set(tool_spans) == {"execute_tool echo", "execute_tool flaky", "execute_tool lookup"}
    events = await stream(redis, key(sub.run_id))
    call_ids = {e.payload["name"]: e.payload["toolCallId"] for e in events if e.kind == "tool_call"}
    for name, sp in tool_spans.items():
        a = dict(sp.attributes or {})
        assert sp.parent is not None and sp.parent.span_id == attempt.context.span_id
        assert a["gen_ai.operation.name"] == "execute_tool" and a["gen_ai.tool.name"] == name.split(" ")[1]
        assert a["gen_ai.tool.call.id"] == call_ids[name.removeprefix("execute_tool ")]
    assert [e.name for e in tool_spans["execute_tool flaky"].events] == ["agentmill.tool.retry"]
    lookup = tool_spans["execute_tool lookup"].context.span_id
    assert [h.get("traceparent", "")[:-3] for h in tool_headers] == [
        f"00-{hexid(trace_id, 32)}-{hexid(lookup, 16)}"
    ]

    # contents stay out unless AGENTMILL_TRACE_CONTENT=true
    recorded = orjson.dumps([{k: str(v) for k, v in (s.attributes or {}).items()} for s in spans])
    assert b"hush" not in recorded and b"secret words" not in recorded and b"all done" not in recorded


async def test_contents_are_recorded_only_when_asked(
    redis: Redis, redis_url: str, exporter: InMemorySpanExporter
) -> None:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.install(provider, content=True)
    p = producer_for(redis, redis_url)
    script = [{"toolCalls": [{"name": "echo", "arguments": {"text": "secret words"}}]}, {"text": "all done"}]
    sub = await p.submit(script_run(script), trace=TRACEPARENT)
    async with running_worker(redis_url):
        await wait_all(p, [sub.run_id], 20)
    spans = exporter.get_finished_spans()
    chat = [dict(s.attributes or {}) for s in by_name(spans, "chat ")]
    assert "go" in chat[0]["gen_ai.input.messages"] and "all done" in chat[1]["gen_ai.output.messages"]
    (tool,) = [dict(s.attributes or {}) for s in by_name(spans, "execute_tool ")]
    assert (
        "secret words" in tool["gen_ai.tool.call.arguments"]
        and tool["gen_ai.tool.call.result"] == "secret words"
    )


async def test_submissions_store_a_valid_trace_context_and_ignore_a_malformed_one(
    redis: Redis, redis_url: str
) -> None:
    async with api(settings(redis_url)) as url, AsyncClient(url, token="tok-a") as c:
        one = await c.http.post("/v1/runs", json={"agent": "scripted", "inputMessages": [{"role": "user", "content": "x"}]},
                                headers={**A, "traceparent": TRACEPARENT, "tracestate": "vendor=1"})  # fmt: skip
        batch = await c.http.post(
            "/v1/runs/batch", headers={**A, "traceparent": TRACEPARENT},
            json={"runs": [{"agent": "scripted", "inputMessages": [{"role": "user", "content": str(i)}]} for i in range(3)]},
        )  # fmt: skip
        bad = await c.http.post("/v1/runs", json={"agent": "scripted", "inputMessages": [{"role": "user", "content": "x"}]},
                                headers={**A, "traceparent": f"00-{'0' * 32}-{PARENT}-01"})  # fmt: skip
    assert one.status_code == 202 and batch.status_code == 200 and bad.status_code == 202
    rid = key(one.json()["runId"])
    assert await redis.hget(K.run(rid), RunField.TRACE) == f"{TRACEPARENT}\nvendor=1".encode()
    for item in batch.json()["results"]:
        assert await redis.hget(K.run(key(item["runId"])), RunField.TRACE) == TRACEPARENT.encode()
    assert await redis.hget(K.run(key(bad.json()["runId"])), RunField.TRACE) is None


async def test_by_default_the_submitters_trace_stays_in_the_pool(
    redis: Redis,
    redis_url: str,
    exporter: InMemorySpanExporter,
    gpt: tuple[FakeOpenAI, Path, list[dict[str, str]]],
) -> None:
    """The attack: a submitter's tracestate (and trace id) reached model providers and tools. By
    default (AGENTMILL_TRACE_PROPAGATION=pool) the pool's spans continue the submitter's trace, and
    no request leaving the pool carries a trace header."""
    fake, path, tool_headers = gpt
    fake.replies += [Reply(tool_calls=[("lookup", {"q": "x"})]), Reply(text="done")]
    run = {"agent": "gpt", "inputMessages": [{"role": "user", "content": "hi"}]}
    sent = {**A, "traceparent": TRACEPARENT, "tracestate": "vendor=tenant-secret-token"}
    async with running_worker(redis_url, profiles=str(path)), \
            api(settings(redis_url, profiles=str(path))) as url, AsyncClient(url, token="tok-a") as c:  # fmt: skip
        r = await c.http.post("/v1/runs", json=run, headers=sent)
        assert r.status_code == 202, r.text
        assert (await c.wait(r.json()["runId"], timeout=30)).status == "completed"
    spans = exporter.get_finished_spans()
    assert {hexid(s.context.trace_id, 32) for s in spans} == {
        TRACE
    }  # the pool's spans: the submitter's trace
    (attempt,) = by_name(spans, "invoke_agent ")
    assert attempt.parent is not None and hexid(attempt.parent.span_id, 16) == PARENT
    outbound = [*fake.headers, *tool_headers]
    assert len(outbound) == 3
    assert not [h for h in outbound if {"traceparent", "tracestate"} & {k.lower() for k in h}]
    assert b"tenant-secret" not in orjson.dumps(outbound) and TRACE.encode() not in orjson.dumps(outbound)


async def test_with_propagation_none_the_api_keeps_no_trace_context(redis: Redis, redis_url: str) -> None:
    async with (
        api(settings(redis_url, trace_propagation="none")) as url,
        AsyncClient(url, token="tok-a") as c,
    ):
        r = await c.http.post("/v1/runs", json={"agent": "scripted", "inputMessages": [{"role": "user", "content": "x"}]},
                              headers={**A, "traceparent": TRACEPARENT, "tracestate": "vendor=1"})  # fmt: skip
    assert r.status_code == 202 and await redis.hget(K.run(key(r.json()["runId"])), RunField.TRACE) is None


def _steps(n: int, delay_ms: int) -> list[dict[str, Any]]:
    return [{"text": f"step {i} ", "delayMs": delay_ms, "toolCalls": [{"name": "flaky", "arguments": {"failures": 0}}]}
            for i in range(n)] + [{"text": "done"}]  # fmt: skip


async def test_a_worker_sigkilled_mid_run_and_its_successor_export_one_trace(
    redis: Redis, redis_url: str
) -> None:
    """Real worker processes, exporting over OTLP/HTTP to a receiver in this process. (Spans the
    victim finished in its last export interval die with it: nothing here counts on them.)"""
    p = producer_for(redis, redis_url)
    sub = await p.submit(script_run(_steps(5, 300)), trace=TRACEPARENT)
    fast = {"AGENTMILL_LEASE_MS": "2000", "AGENTMILL_HEARTBEAT_MS": "300", "AGENTMILL_RECONCILE_MS": "300"}
    with OtlpReceiver() as rx:
        otel = {"OTEL_EXPORTER_OTLP_ENDPOINT": rx.endpoint, "OTEL_BSP_SCHEDULE_DELAY": "50", **fast}
        victim = WorkerProc(redis_url, env={**otel, "AGENTMILL_WORKER_ID": "victim"}).start()
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:  # mid-run, and its first spans exported
                names = {s["name"] for s in rx.snapshot()}
                if await redis.xlen(K.events(sub.run_id)) >= 8 and "execute_tool flaky" in names:
                    break
                await asyncio.sleep(0.05)
            else:
                raise AssertionError("the victim never got going")
        finally:
            victim.kill()
        rescuer = WorkerProc(redis_url, env={**otel, "AGENTMILL_WORKER_ID": "rescuer"}).start()
        try:
            rec = (await wait_all(p, [sub.run_id], 40))[sub.run_id]
        finally:
            rescuer.stop()  # graceful: the exporter sends what it still holds
        spans = rx.snapshot()
    assert rec.status.value == "completed"
    mine = [s for s in spans if s["traceId"] == TRACE]
    assert len(mine) == len(spans)  # nothing of the run outside the submitter's trace
    by_worker = {
        w: [s for s in mine if s["resource"]["service.instance.id"] == w] for w in ("victim", "rescuer")
    }
    assert by_worker["victim"] and by_worker["rescuer"]
    assert {s["resource"]["service.name"] for s in mine} == {"agentmill-worker"}
    # the victim died inside its attempt: its span never ended, its finished children arrived
    assert not [s for s in by_worker["victim"] if s["name"].startswith("invoke_agent")]
    (attempt,) = [s for s in by_worker["rescuer"] if s["name"].startswith("invoke_agent")]
    assert attempt["parentSpanId"] == PARENT  # the submitter's span, as the first attempt's was
    assert (
        attempt["attributes"]["agentmill.run.attempt"] == 2
        and attempt["attributes"]["agentmill.run.crashes"] == 1
    )
    assert attempt["attributes"]["agentmill.run.outcome"] == "completed"
    victim_parents = {s["parentSpanId"] for s in by_worker["victim"]}
    assert len(victim_parents) == 1 and victim_parents != {attempt["spanId"]}  # its own (lost) attempt span
    rescued = [s for s in by_worker["rescuer"] if s is not attempt]
    assert rescued and {s["parentSpanId"] for s in rescued} == {attempt["spanId"]}
    assert {s["attributes"]["gen_ai.operation.name"] for s in mine} >= {
        "chat",
        "execute_tool",
        "invoke_agent",
    }

    def calls(who: str) -> set[str]:
        return {
            s["attributes"]["gen_ai.tool.call.id"]
            for s in by_worker[who]
            if s["name"] == "execute_tool flaky"
        }

    # a call the victim finished (and recorded) is never run again; the rescuer ran the rest
    assert calls("rescuer") and not calls("victim") & calls("rescuer")
    assert len(calls("victim") | calls("rescuer")) <= 5


async def test_an_approval_wait_is_a_span_between_two_attempts_of_one_trace(
    redis: Redis, redis_url: str, exporter: InMemorySpanExporter
) -> None:
    p = producer_for(redis, redis_url)
    script = [{"toolCalls": [{"id": "a", "name": "echo", "arguments": {"text": "x"}}]}, {"text": "ok"}]
    sub = await p.submit(script_run(script, toolPolicy={"requireApprovalByDefault": True}), trace=TRACEPARENT)
    async with running_worker(redis_url):
        # awaiting_human is not terminal: Producer.wait would only return at its timeout
        await until_status(redis, sub.run_id, "awaiting_human", 10)
        rec = await p.get(sub.run_id)
        assert rec is not None and rec.status.value == "awaiting_human"
        await asyncio.sleep(0.3)  # the wait lasts at least this
        assert await p.settle_approval(sub.run_id, "c1.0", approved=True) == "resumed"
        rec = (await wait_all(p, [sub.run_id], 10))[sub.run_id]
    assert rec.status.value == "completed"
    spans = exporter.get_finished_spans()
    assert {hexid(s.context.trace_id, 32) for s in spans} == {TRACE}
    first, second = sorted(by_name(spans, "invoke_agent "), key=lambda s: s.start_time or 0)
    assert [dict(s.attributes or {})["agentmill.run.outcome"] for s in (first, second)] == [
        "awaiting_human",
        "completed",
    ]
    assert {hexid(s.parent.span_id, 16) for s in (first, second) if s.parent} == {PARENT}
    (wait,) = by_name(spans, "await_approval")
    assert wait.parent is not None and wait.parent.span_id == second.context.span_id
    assert dict(wait.attributes or {})["agentmill.wait.ended_by"] == "ApprovalsDecided"
    assert wait.start_time is not None and wait.end_time is not None and first.end_time is not None
    assert wait.end_time - wait.start_time >= 300_000_000  # ns: from the parking commit to the decision
    assert abs(wait.start_time - first.end_time) < 200_000_000  # it began when the first attempt parked
    (tool,) = by_name(spans, "execute_tool ")
    assert tool.parent is not None and tool.parent.span_id == second.context.span_id


async def test_a_sub_agents_child_run_continues_its_parents_trace(
    redis: Redis, redis_url: str, exporter: InMemorySpanExporter, tmp_path: Path
) -> None:
    scripted = {"kind": "scripted", "mode": "script"}
    helper = {"name": "helper", "provider": {**scripted, "script": [{"text": "helped"}]}}
    boss = {"name": "boss", "provider": scripted, "agentTools": [{"agent": "helper", "name": "ask_helper"}]}
    path = tmp_path / "profiles.json"
    path.write_bytes(orjson.dumps({"profiles": [boss, helper]}))
    p = producer_for(redis, redis_url, profiles=str(path))
    script = [{"toolCalls": [{"name": "ask_helper", "arguments": {"task": "t"}}]}, {"text": "done"}]
    sub = await p.submit({"agent": "boss", "inputMessages": [{"role": "user", "content": "go"}],
                          "runtimeHints": {"script": script}}, trace=TRACEPARENT)  # fmt: skip
    async with running_worker(redis_url, profiles=str(path)):
        rec = (await wait_all(p, [sub.run_id], 20))[sub.run_id]
    assert rec.status.value == "completed"
    spans = exporter.get_finished_spans()
    assert {hexid(s.context.trace_id, 32) for s in spans} == {TRACE}
    attempts = by_name(spans, "invoke_agent ")
    (child,) = [s for s in attempts if s.name == "invoke_agent helper"]
    parents = [s for s in attempts if s.name == "invoke_agent boss"]
    assert len(parents) == 2  # before and after its wait for the child
    assert all(s.parent is not None and hexid(s.parent.span_id, 16) == PARENT for s in parents)
    assert child.parent is not None and child.parent.span_id in {s.context.span_id for s in parents}
    (wait,) = by_name(spans, "await_children")
    assert (
        wait.parent is not None
        and wait.parent.span_id == max(parents, key=lambda s: s.start_time or 0).context.span_id
    )


async def test_an_mcp_tool_call_carries_its_spans_traceparent(
    redis: Redis,
    redis_url: str,
    exporter: InMemorySpanExporter,
    mcp_served: tuple[McpServerProc, str],
) -> None:
    from tests.support.mcp_profiles import call, mcp_run
    from tests.support.mcp_server import calls

    srv, profiles = mcp_served
    p = producer_for(redis, redis_url, profiles=profiles)
    async with running_worker(redis_url, profiles=profiles, trace_propagation="all"):
        sub = await p.submit(
            mcp_run([{"toolCalls": [call("srv__add", a=2, b=3)]}, {"text": "ok"}]), trace=TRACEPARENT
        )
        rec = (await wait_all(p, [sub.run_id], 60))[sub.run_id]
    seen = calls(srv.calls_file)
    assert rec.status.value == "completed"
    (tool,) = by_name(exporter.get_finished_spans(), "execute_tool ")
    assert dict(tool.attributes or {})["gen_ai.tool.name"] == "srv__add"
    assert [c["traceparent"][:-3] for c in seen] == [f"00-{TRACE}-{hexid(tool.context.span_id, 16)}"]
