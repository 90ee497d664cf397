"""The OpenAI-compatible provider against recorded SSE byte streams (httpx.MockTransport)."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import orjson
import pytest
from pydantic import ValidationError

from agentmill_client.models import Message, ToolCall
from shared.provider_config import ProviderConfig
from worker.core.config import ToolSpec
from worker.machine import ModelRequest, identify
from worker.models.base import Chunk, ModelCallError, ReasoningDelta, StreamEnd, TextDelta, ToolCallDelta
from worker.models.openai import OpenAIProvider, request_body
from worker.models.sse import SseParser

KEY = "sk-test-SECRET-123"


def req(**kw: object) -> ModelRequest:
    base = dict(run_id="r1", session_id=None, messages=[Message(role="user", content="hi")], tools=[],
                model_call_index=1, attempt=0, failures=0)  # fmt: skip
    return ModelRequest(**{**base, **kw})  # type: ignore[arg-type]


def sse(*objs: object, done: bool = True) -> bytes:
    out = b"".join(b"data: " + (o if isinstance(o, bytes) else orjson.dumps(o)) + b"\n\n" for o in objs)
    return out + (b"data: [DONE]\n\n" if done else b"")


def delta(**d: object) -> dict:
    return {"choices": [{"index": 0, "delta": d, "finish_reason": None}]}


def finish(reason: str) -> dict:
    return {"choices": [{"index": 0, "delta": {}, "finish_reason": reason}]}


async def run(
    handler: Callable[[httpx.Request], httpx.Response], monkeypatch: pytest.MonkeyPatch, **cfg: object
) -> list[Chunk]:
    monkeypatch.setenv("TEST_OPENAI_KEY", KEY)
    config = ProviderConfig(
        kind="openai", base_url="http://model.test/v1", model="m", api_key_env="TEST_OPENAI_KEY", **cfg
    )  # type: ignore[arg-type]
    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        p = OpenAIProvider(config, client)
        assert KEY not in repr(p)
        return [c async for c in p.stream(req(), {})]


def reply(body: bytes, status: int = 200, **headers: str) -> Callable[[httpx.Request], httpx.Response]:
    def handler(request: httpx.Request) -> httpx.Response:
        assert request.headers["authorization"] == f"Bearer {KEY}"
        return httpx.Response(status, content=body, headers={"content-type": "text/event-stream", **headers})

    return handler


def assembled(chunks: list[Chunk]) -> tuple[str, list[ToolCall], StreamEnd]:
    text = "".join(c.text for c in chunks if isinstance(c, TextDelta))
    calls: dict[int, dict[str, str]] = {}
    for c in chunks:
        if isinstance(c, ToolCallDelta):
            s = calls.setdefault(c.index, {"id": "", "name": "", "arguments": ""})
            s["id"] = s["id"] or (c.id or "")
            s["name"] = s["name"] or (c.name or "")
            s["arguments"] += c.arguments
    end = chunks[-1]
    assert isinstance(end, StreamEnd)
    # A call without an id (legacy function_call) gets one from the runner; stand in for it here.
    return text, [ToolCall(**{**v, "id": v["id"] or "generated"}) for _, v in sorted(calls.items())], end


async def test_text_with_usage_in_a_final_chunk_with_empty_choices(monkeypatch: pytest.MonkeyPatch) -> None:
    body = sse(delta(role="assistant", content="Hel"), delta(content="lo"), finish("stop"),
               {"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 2}})  # fmt: skip
    text, calls, end = assembled(await run(reply(body), monkeypatch))
    assert text == "Hello" and calls == [] and end.finish_reason == "stop"
    assert end.usage is not None and (end.usage.input_tokens, end.usage.output_tokens) == (7, 2)


async def test_parallel_tool_calls_assembled_by_index_with_null_choices_usage(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tc = lambda i, **kw: delta(tool_calls=[{"index": i, **kw}])  # noqa: E731
    body = sse(
        tc(0, id="call_a", type="function", function={"name": "calc", "arguments": ""}),
        tc(1, id="call_b", type="function", function={"name": "echo", "arguments": '{"te'}),
        tc(0, function={"arguments": '{"expr'}),
        tc(1, id="call_b", function={"arguments": 'xt": "hi"}'}),  # id repeated in later chunks
        tc(0, function={"arguments": 'ession": "1+1"}'}),
        finish("tool_calls"),
        {"choices": None, "usage": {"prompt_tokens": 3, "completion_tokens": 4}},
    )
    _, calls, end = assembled(await run(reply(body), monkeypatch))
    assert [(c.id, c.name, orjson.loads(c.arguments)) for c in calls] == [
        ("call_a", "calc", {"expression": "1+1"}), ("call_b", "echo", {"text": "hi"}),
    ]  # fmt: skip
    assert end.finish_reason == "tool_calls" and end.usage is not None and end.usage.output_tokens == 4


async def test_legacy_function_call_and_keepalive_comments(monkeypatch: pytest.MonkeyPatch) -> None:
    body = (b": keep-alive\n\n" + sse(delta(function_call={"name": "calc", "arguments": '{"a":'}), done=False)
            + b": ping\n\n" + sse(delta(function_call={"arguments": "1}"}), finish("function_call")))  # fmt: skip
    _, calls, _ = assembled(await run(reply(body), monkeypatch))
    assert [(c.name, c.arguments) for c in calls] == [("calc", '{"a":1}')]


async def test_a_stream_without_done_still_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    text, _, end = assembled(
        await run(reply(sse(delta(content="ok"), finish("stop"), done=False)), monkeypatch)
    )
    assert text == "ok" and end.finish_reason == "stop"


async def test_a_stream_that_stops_without_a_finish_reason_reports_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The provider reports what the stream said; the machine calls it a truncation (test_completion)."""
    text, _, end = assembled(
        await run(reply(sse(delta(content="Name a colour. (2"), done=False)), monkeypatch)
    )
    assert text == "Name a colour. (2" and end.finish_reason is None and end.done is False
    _, _, end = assembled(await run(reply(b": nothing\n\n"), monkeypatch))
    assert end.finish_reason is None
    # [DONE] without a finish_reason before it is no ending either.
    _, _, end = assembled(await run(reply(sse(delta(content="par"))), monkeypatch))
    assert end.finish_reason is None and end.done is True


async def test_reasoning_deltas_are_apart_from_the_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    body = sse(delta(reasoning_content="Let me think"), delta(reasoning=" more."), delta(content="Blue."),
               finish("stop"))  # fmt: skip
    chunks = await run(reply(body), monkeypatch)
    assert [c.text for c in chunks if isinstance(c, ReasoningDelta)] == ["Let me think", " more."]
    text, _, end = assembled(chunks)
    assert text == "Blue." and end.finish_reason == "stop" and end.done is True


async def test_an_error_in_the_middle_of_the_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    body = sse(delta(content="par"), {"error": {"message": "upstream overloaded", "type": "server_error"}})
    with pytest.raises(ModelCallError) as exc:
        await run(reply(body), monkeypatch)
    assert exc.value.failure.kind == "stream" and "overloaded" in exc.value.failure.message
    body = sse(
        {
            "error": {
                "message": "This model's maximum context length is 8192 tokens",
                "code": "context_length_exceeded",
            }
        }
    )
    with pytest.raises(ModelCallError) as exc:
        await run(reply(body), monkeypatch)
    assert exc.value.failure.kind == "overflow"


@pytest.mark.parametrize(
    ("headers", "expected_ms"), [({"retry-after": "1"}, 1000), ({"retry-after-ms": "250"}, 250), ({}, None)]
)
async def test_429_is_retryable_and_carries_retry_after(
    monkeypatch: pytest.MonkeyPatch, headers: dict, expected_ms: int | None
) -> None:
    with pytest.raises(ModelCallError) as exc:
        await run(reply(b'{"error": {"message": "slow down"}}', 429, **headers), monkeypatch)
    f = exc.value.failure
    assert (f.kind, f.status, f.retry_after_ms) == ("http", 429, expected_ms)
    assert KEY not in str(exc.value) and KEY not in repr(exc.value.failure)


async def test_401_and_context_length_400(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ModelCallError) as exc:
        await run(reply(b'{"error": {"message": "Incorrect API key provided"}}', 401), monkeypatch)
    assert (exc.value.failure.kind, exc.value.failure.status) == ("http", 401) and KEY not in str(exc.value)
    body = b'{"error": {"message": "maximum context length exceeded", "code": "context_length_exceeded"}}'
    with pytest.raises(ModelCallError) as exc:
        await run(reply(body, 400), monkeypatch)
    assert exc.value.failure.kind == "overflow"


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (httpx.ConnectError("refused"), "connection"),
        (httpx.ReadTimeout("slow"), "timeout"),
        (httpx.WriteError("broken pipe"), "connection"),  # was a fatal "internal" failure
        (httpx.LocalProtocolError("bad state"), "connection"),
        (httpx.ProxyError("proxy down"), "connection"),
    ],
)
async def test_transport_failures(monkeypatch: pytest.MonkeyPatch, error: Exception, kind: str) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise error

    with pytest.raises(ModelCallError) as exc:
        await run(handler, monkeypatch)
    assert exc.value.failure.kind == kind and KEY not in str(exc.value)


async def test_chunks_split_anywhere_including_inside_utf8() -> None:
    body = sse(delta(content="héllo wörld ✓"), finish("stop")).replace(b"\n\n", b"\r\n\r\n", 1)
    for size in (1, 2, 3, 7):
        p = SseParser()
        events = [e for i in range(0, len(body), size) for e in p.feed(body[i : i + size])] + p.close()
        assert orjson.loads(events[0].data)["choices"][0]["delta"]["content"] == "héllo wörld ✓"
        assert events[-1].data == "[DONE]"


def test_request_body_maps_messages_tools_and_options() -> None:
    cfg = ProviderConfig(kind="openai", base_url="http://x", model="m1", temperature=0.2, max_tokens=99,
                         tool_choice="auto", extra_body={"top_p": 0.9})  # fmt: skip
    msgs = [
        Message(role="system", content="sys"), Message(role="user", content="u"),
        Message(role="assistant", content="", tool_calls=[ToolCall(id="c1", name="calc", arguments='{"a":1}')]),
        Message(role="tool", content="2", tool_call_id="c1", name="calc"),
    ]  # fmt: skip
    body = request_body(
        cfg, req(messages=msgs, tools=[ToolSpec(name="calc", description="d", parameters={"type": "object"})])
    )
    assert (
        body["model"] == "m1" and body["stream"] is True and body["stream_options"] == {"include_usage": True}
    )
    assert body["messages"][2] == {"role": "assistant", "content": "",
                                   "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "calc", "arguments": '{"a":1}'}}]}  # fmt: skip
    assert body["messages"][3] == {"role": "tool", "tool_call_id": "c1", "content": "2"}
    assert body["tools"][0]["function"]["name"] == "calc" and body["tool_choice"] == "auto"
    assert (body["temperature"], body["max_tokens"], body["top_p"]) == (0.2, 99, 0.9)


def test_calls_go_back_under_the_providers_ids_made_unique() -> None:
    """agentmill's ids never reach the provider: both rounds said call_0, the wire says call_0 and
    a suffixed call_0, and each tool message answers the call it belongs to."""
    cfg = ProviderConfig(kind="openai", base_url="http://x", model="m")
    earlier = [Message(role="user", content="u")]
    one = identify(Message(role="assistant", tool_calls=[ToolCall(id="call_0", name="calc")]), 1, earlier)
    earlier += [one, Message(role="tool", content="1", tool_call_id="c1.0", name="calc")]
    two = identify(Message(role="assistant", tool_calls=[ToolCall(id="call_0", name="calc")]), 2, earlier)
    msgs = [*earlier, two, Message(role="tool", content="2", tool_call_id="c2.0", name="calc")]
    wire = request_body(cfg, req(messages=msgs))["messages"]
    ids = [c["id"] for m in wire if m["role"] == "assistant" for c in m["tool_calls"]]
    assert ids == ["call_0", "call_0_2_0"]
    assert [(m["tool_call_id"], m["content"]) for m in wire if m["role"] == "tool"] == [
        ("call_0", "1"), ("call_0_2_0", "2")]  # fmt: skip


def test_tool_choice_takes_the_string_or_the_object_form() -> None:
    forced = {"type": "function", "function": {"name": "calc"}}
    tools = [ToolSpec(name="calc", description="d", parameters={"type": "object"})]
    for choice in ("required", forced):
        cfg = ProviderConfig.model_validate(
            {"kind": "openai", "baseUrl": "http://x", "model": "m", "toolChoice": choice}
        )
        assert request_body(cfg, req(tools=tools))["tool_choice"] == choice
        assert "tool_choice" not in request_body(cfg, req())  # no tools, no tool_choice
    with pytest.raises(ValidationError, match="toolChoice as an object"):
        ProviderConfig.model_validate({"kind": "openai", "toolChoice": {"type": "function", "function": {}}})


def test_no_message_is_sent_with_null_content() -> None:
    """llama-cpp-python's server rejects a null content (tests/data/llama_cpp/null_content_500.json)."""
    cfg = ProviderConfig(kind="openai", base_url="http://x", model="m")
    msgs = [
        Message(role="system", content=""), Message(role="user", content="u"),
        Message(role="assistant", tool_calls=[ToolCall(id="c1", name="calc", arguments="{}")]),
        Message(role="tool", content="", tool_call_id="c1", name="calc"), Message(role="assistant", content="x"),
    ]  # fmt: skip
    for m in request_body(cfg, req(messages=msgs))["messages"]:
        assert isinstance(m["content"], str), m
