"""The anthropic provider: its request body (roles, tool results grouped, images, tool_choice,
thinking blocks sent back, cache breakpoints on a byte-stable prefix) and its errors (httpx.MockTransport
serving recorded responses), and the machine's reading of Anthropic's stop reasons."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentmill_client.models import ImagePart, ImageUrl, Message, TextPart, ThinkingBlock, ToolCall
from shared.profiles import ANTHROPIC_MAX_TOKENS, AgentProfile
from shared.provider_config import ProviderConfig
from worker.core import policy
from worker.core.config import ToolSpec
from worker.machine import ModelRequest
from worker.models.anthropic import AnthropicProvider
from worker.models.anthropic_wire import MAX_BREAKPOINTS, request_body
from worker.models.base import Chunk, ModelCallError, StreamEnd, TextDelta
from worker.models.openai import request_body as openai_body

KEY = "sk-ant-test-SECRET-42"
DATA = Path(__file__).resolve().parents[1] / "data" / "anthropic"
TOOLS = [
    ToolSpec(name="calculator", description="Evaluate arithmetic.", parameters={"type": "object"}),
    ToolSpec(name="echo", description="Echo.", parameters={"type": "object", "properties": {"t": {}}}),
]


def cfg(**kw: Any) -> ProviderConfig:
    return ProviderConfig.model_validate(
        {"kind": "anthropic", "model": "claude-x", "apiKeyEnv": "TEST_ANT_KEY", **kw}
    )


def req(messages: list[Message], tools: list[ToolSpec] = TOOLS, **kw: Any) -> ModelRequest:
    return ModelRequest(run_id="r1", session_id=None, messages=messages, tools=tools, model_call_index=len(messages),
                        attempt=0, failures=0, **kw)  # fmt: skip


def call(i: int, *args: tuple[str, str]) -> Message:
    return Message(role="assistant", content="", tool_calls=[
        ToolCall(id=f"c{i}.{n}", provider_id=f"toolu_{i}_{n}", name=name, arguments=a)
        for n, (name, a) in enumerate(args)
    ])  # fmt: skip


def result(i: int, n: int, text: str) -> Message:
    return Message(role="tool", tool_call_id=f"c{i}.{n}", name="calculator", content=text)


SYSTEM = Message(role="system", content="You are careful.")
TURNS = [
    SYSTEM,
    Message(role="user", content="what is 2+3 and 4*5?"),
    call(1, ("calculator", '{"expression": "2+3"}'), ("calculator", '{"expression": "4*5"}')),
    result(1, 0, "5"),
    result(1, 1, "20"),
    call(2, ("echo", '{"t": "x"}')),
    result(2, 0, "x"),
    Message(role="assistant", content="5 and 20"),
]


def test_defaults_the_api_needs() -> None:
    c = cfg()
    assert c.base_url == "https://api.anthropic.com" and c.max_tokens == ANTHROPIC_MAX_TOKENS
    with pytest.raises(ValueError, match="an anthropic provider needs model"):
        AgentProfile.model_validate({"name": "a", "provider": {"kind": "anthropic"}})
    with pytest.raises(ValueError, match="budgetTokens must be below maxTokens"):
        AgentProfile.model_validate({"name": "a", "provider": {"kind": "anthropic", "model": "m", "maxTokens": 2000,
                                                               "thinking": {"budgetTokens": 2000}}})  # fmt: skip


def test_thinking_refuses_a_forced_tool_choice() -> None:
    with pytest.raises(ValueError, match='with thinking, toolChoice may only be "auto" or "none"'):
        AgentProfile(name="a", provider=cfg(thinking={"budgetTokens": 2048}, toolChoice="required"))
    with pytest.raises(ValueError, match="with thinking, temperature may only be 1"):
        AgentProfile(name="a", provider=cfg(thinking={"budgetTokens": 2048}, temperature=0))
    with pytest.raises(ValueError, match="thinking is read only by an anthropic provider"):
        AgentProfile.model_validate(
            {"name": "a", "provider": {"kind": "openai", "baseUrl": "http://x", "model": "m",
                                       "thinking": {"budgetTokens": 2048}}}
        )  # fmt: skip


def test_roles_tool_results_grouped_and_system_on_top() -> None:
    body = request_body(cfg(), req(TURNS[:5]))
    assert body["system"] == [
        {"type": "text", "text": "You are careful.", "cache_control": {"type": "ephemeral"}}
    ]
    assert body["max_tokens"] == ANTHROPIC_MAX_TOKENS and body["stream"] is True
    roles = [m["role"] for m in body["messages"]]
    assert roles == ["user", "assistant", "user"]
    uses = body["messages"][1]["content"]
    assert [(b["type"], b["id"], b["input"]) for b in uses] == [
        ("tool_use", "toolu_1_0", {"expression": "2+3"}),
        ("tool_use", "toolu_1_1", {"expression": "4*5"}),
    ]
    results = body["messages"][2]["content"]
    assert [(b["type"], b["tool_use_id"], b["content"]) for b in results] == [
        ("tool_result", "toolu_1_0", "5"),
        ("tool_result", "toolu_1_1", "20"),
    ]
    assert body["tools"][-1]["cache_control"] == {"type": "ephemeral"}
    assert body["tools"][0] == {"name": "calculator", "description": "Evaluate arithmetic.",
                                "input_schema": {"type": "object"}}  # fmt: skip


def _prefix(body: dict[str, Any]) -> bytes:
    """What the cache holds for a call: tools, system, and its messages without the breakpoints
    (a breakpoint marks a position; the bytes before it are what must match)."""

    def plain(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items() if k != "cache_control"}
        if isinstance(v, list):
            return [plain(x) for x in v]
        return v

    return orjson.dumps({"tools": plain(body["tools"]), "system": plain(body["system"])})


def test_the_prefix_of_turn_n_is_the_start_of_turn_n_plus_1() -> None:
    c = cfg()
    n = request_body(c, req(TURNS[:5], response_format=None))
    n1 = request_body(c, req(TURNS[:7]))
    assert _prefix(n) == _prefix(n1)  # tools and system: the same bytes on every call of a run
    # the messages of call N are the first messages of call N+1, but for where the breakpoints sit
    assert _blocks(n1["messages"])[: len(n["messages"])] == _blocks(n["messages"])
    # call N wrote the cache at its end; call N+1 has a breakpoint at that same block, so it reads it
    last = n["messages"][-1]["content"][-1]
    assert last.get("cache_control") == {"type": "ephemeral"}
    same = n1["messages"][len(n["messages"]) - 1]["content"][len(n["messages"][-1]["content"]) - 1]
    assert same.get("cache_control") == {"type": "ephemeral"}
    marks = orjson.dumps(n1).count(b'"cache_control"')
    assert marks <= MAX_BREAKPOINTS and marks == 4


def _blocks(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages with their breakpoints taken out, a string content as its one text block."""
    out = orjson.loads(orjson.dumps(messages).replace(b',"cache_control":{"type":"ephemeral"}', b""))
    for m in out:
        if isinstance(m["content"], str):
            m["content"] = [{"type": "text", "text": m["content"]}]
    return list(out)


def test_a_runs_own_calls_differ_in_nothing_but_the_transcript() -> None:
    """Same messages, another attempt, index and failures count: byte-identical bodies."""
    a = req(TURNS[:5])
    b = ModelRequest(run_id="r1", session_id=None, messages=TURNS[:5], tools=TOOLS, model_call_index=9, attempt=3,
                     failures=2, iterations=7)  # fmt: skip
    assert orjson.dumps(request_body(cfg(), a)) == orjson.dumps(request_body(cfg(), b))


def test_caching_off_sends_no_breakpoint_and_text_as_strings() -> None:
    body = request_body(cfg(promptCaching=False), req(TURNS))
    assert b"cache_control" not in orjson.dumps(body)
    assert body["system"] == "You are careful." and body["messages"][0]["content"] == "what is 2+3 and 4*5?"


@pytest.mark.parametrize(
    ("choice", "wire"),
    [("auto", {"type": "auto"}), ("required", {"type": "any"}), ("none", {"type": "none"}),
     ({"type": "function", "function": {"name": "echo"}}, {"type": "tool", "name": "echo"})],
)  # fmt: skip
def test_tool_choice(choice: Any, wire: dict[str, Any]) -> None:
    assert request_body(cfg(toolChoice=choice), req(TURNS[:2]))["tool_choice"] == wire


def test_images_base64_and_url() -> None:
    user = Message(role="user", content=[
        TextPart(text="what is this?"),
        ImagePart(image_url=ImageUrl(url="data:image/png;base64,iVBORw0KGgo=")),
        ImagePart(image_url=ImageUrl(url="https://example.com/cat.jpg")),
    ])  # fmt: skip
    blocks = request_body(cfg(), req([SYSTEM, user]))["messages"][0]["content"]
    assert blocks[1] == {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="},
    }
    assert blocks[2]["source"] == {"type": "url", "url": "https://example.com/cat.jpg"}


def test_thinking_blocks_go_back_unchanged_before_the_calls() -> None:
    thought = ThinkingBlock(type="thinking", thinking="use the tool", signature="EqQBsig")
    redacted = ThinkingBlock(type="redacted_thinking", data="EmwKdata")
    reply = call(1, ("calculator", '{"expression": "2+3"}')).model_copy(
        update={"thinking_blocks": [thought, redacted]}
    )
    body = request_body(
        cfg(thinking={"budgetTokens": 2048}), req([SYSTEM, TURNS[1], reply, result(1, 0, "5")])
    )
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert body["messages"][1]["content"][:3] == [
        {"type": "thinking", "thinking": "use the tool", "signature": "EqQBsig"},
        {"type": "redacted_thinking", "data": "EmwKdata"},
        {"type": "tool_use", "id": "toolu_1_0", "name": "calculator", "input": {"expression": "2+3"}},
    ]


def test_a_call_without_tools_tells_earlier_calls_as_text() -> None:
    body = request_body(cfg(), req(TURNS[:5], tools=[]))
    assert "tools" not in body and b"tool_use" not in orjson.dumps(body)
    assert body["messages"][1]["content"][0]["text"].startswith("[called the tool calculator")


def test_response_format_is_asked_in_the_system_prompt() -> None:
    from agentmill_client.models import ResponseFormat

    fmt = ResponseFormat.model_validate(
        {"type": "json_schema", "jsonSchema": {"name": "n", "schema": {"type": "object"}}}
    )
    body = request_body(cfg(), req(TURNS[:2], response_format=fmt))
    assert body["system"][0]["text"].endswith('matching this JSON Schema: {"type":"object"}')


def test_openai_kind_prompt_cache_key_only_when_asked() -> None:
    oc = ProviderConfig(kind="openai", base_url="http://x/v1", model="m")
    assert "prompt_cache_key" not in openai_body(oc, req(TURNS[:2]))
    on = oc.model_copy(update={"prompt_cache_key": True})
    assert openai_body(on, req(TURNS[:2]))["prompt_cache_key"] == "r1"
    assert (
        openai_body(on, req(TURNS[:2]).__class__(**{**_fields(req(TURNS[:2])), "session_id": "s9"}))[
            "prompt_cache_key"
        ]
        == "s9"
    )


def _fields(r: ModelRequest) -> dict[str, Any]:
    return {f: getattr(r, f) for f in r.__dataclass_fields__}


# ---- the provider over HTTP ----


async def run(
    handler: Callable[[httpx.Request], httpx.Response], monkeypatch: pytest.MonkeyPatch
) -> list[Chunk]:
    monkeypatch.setenv("TEST_ANT_KEY", KEY)
    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        p = AnthropicProvider(cfg(baseUrl="http://ant.test"), client)
        assert KEY not in repr(p)
        return [c async for c in p.stream(req(TURNS[:2]), {})]


def serve(body: bytes, status: int = 200, **headers: str) -> Callable[[httpx.Request], httpx.Response]:
    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/v1/messages"
        assert request.headers["x-api-key"] == KEY and request.headers["anthropic-version"] == "2023-06-01"
        return httpx.Response(status, content=body, headers={"content-type": "text/event-stream", **headers})

    return handler


async def test_a_recorded_stream_end_to_end(monkeypatch: pytest.MonkeyPatch) -> None:
    got = await run(serve((DATA / "text.sse").read_bytes()), monkeypatch)
    assert "".join(c.text for c in got if isinstance(c, TextDelta)) == "Hello — wörld 👋, the answer is 42."
    assert isinstance(got[-1], StreamEnd) and got[-1].finish_reason == "stop"


async def test_a_stream_cut_before_message_stop_is_no_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    got = await run(serve((DATA / "cut_before_stop.sse").read_bytes()), monkeypatch)
    assert isinstance(got[-1], StreamEnd) and got[-1].finish_reason is None
    assert policy.reply_failure(None) is not None


async def test_an_overloaded_error_event_is_retryable(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ModelCallError) as ei:
        await run(serve((DATA / "error_overloaded.sse").read_bytes()), monkeypatch)
    assert ei.value.failure.status == 529 and policy.classify(ei.value.failure) == "retryable"


def _err(kind: str, message: str) -> bytes:
    return orjson.dumps({"type": "error", "error": {"type": kind, "message": message}})


@pytest.mark.parametrize(
    ("status", "body", "headers", "cls", "kind"),
    [
        (429, _err("rate_limit_error", "slow down"), {"retry-after": "7"}, "retryable", "http"),
        (529, _err("overloaded_error", "Overloaded"), {}, "retryable", "http"),
        (500, _err("api_error", "boom"), {}, "retryable", "http"),
        (400, _err("invalid_request_error", "messages.0: bad field"), {}, "fatal", "http"),
        (400, _err("invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum"), {}, "overflow",
         "overflow"),
        (401, _err("authentication_error", "invalid x-api-key"), {}, "fatal", "http"),
        (403, _err("permission_error", "no"), {}, "fatal", "http"),
    ],
)  # fmt: skip
async def test_http_errors_map_to_the_retry_classes(
    monkeypatch: pytest.MonkeyPatch, status: int, body: bytes, headers: dict[str, str], cls: str, kind: str
) -> None:
    with pytest.raises(ModelCallError) as ei:
        await run(serve(body, status, **headers), monkeypatch)
    f = ei.value.failure
    assert policy.classify(f) == cls and f.kind == kind
    assert orjson.loads(body)["error"]["message"] in f.message
    if status == 429:
        assert f.retry_after_ms == 7_000


def test_stop_reasons_max_tokens_and_refusal_are_never_a_success() -> None:
    cut = policy.reply_failure("max_tokens")
    assert cut is not None and cut.kind == "truncated" and "maxTokens" in cut.message
    refused = policy.reply_failure("refusal")
    assert refused is not None and policy.classify(refused) == "fatal" and "refused" in refused.message
    assert policy.reply_failure("stop") is None and policy.reply_failure("tool_calls") is None


def test_openai_kind_reads_cached_tokens_into_cache_reads() -> None:
    from agentmill_client.models import Usage
    from worker.models.openai import ChunkReader

    r = ChunkReader()
    r.consume({"choices": [], "usage": {"prompt_tokens": 100, "completion_tokens": 5,
                                        "prompt_tokens_details": {"cached_tokens": 80}}})  # fmt: skip
    assert r.end(done=True).usage == Usage(input_tokens=100, output_tokens=5, cache_read_tokens=80)
    r.consume(
        {"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 1, "prompt_tokens_details": None}}
    )
    assert r.end(done=True).usage == Usage(input_tokens=7, output_tokens=1)


def _transcript(rounds: list[tuple[int, str]]) -> list[Message]:
    """A run's transcript: per round, ``n`` parallel calls with their results (n > 0), or a text
    answer and the user's next message (n == 0)."""
    out = [SYSTEM, Message(role="user", content="start")]
    for i, (n, text) in enumerate(rounds, start=1):
        if n:
            out.append(call(i, *[("calculator", f'{{"expression": "{i}+{k}"}}') for k in range(n)]))
            out += [result(i, k, f"{text}{k}") for k in range(n)]
        else:
            out += [
                Message(role="assistant", content=text or "ok"),
                Message(role="user", content=f"next {i}"),
            ]
    return out


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.text(max_size=20)), min_size=2, max_size=8))
def test_each_call_starts_with_the_previous_calls_prompt(rounds: list[tuple[int, str]]) -> None:
    """For any run, call N+1's tools, system and messages begin with call N's, byte for byte but
    for where the breakpoints sit; at most 4 breakpoints, one of them where call N ended."""
    full = _transcript(rounds)
    # the calls a run makes: after its input, after each round's last result, after a user's message
    cuts = [i for i in range(2, len(full) + 1) if i == len(full) or full[i].role == "assistant"]
    bodies = [request_body(cfg(), req(full[:i])) for i in cuts]
    for a, b in itertools.pairwise(bodies):
        assert _prefix(a) == _prefix(b)
        assert _blocks(b["messages"])[: len(a["messages"])] == _blocks(a["messages"])
        end = len(a["messages"]) - 1  # where call N wrote the cache, call N+1 has a breakpoint
        assert b["messages"][end]["content"][-1]["cache_control"] == {"type": "ephemeral"}
        assert orjson.dumps(b).count(b'"cache_control"') <= MAX_BREAKPOINTS
