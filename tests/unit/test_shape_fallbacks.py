"""Request shapes a server refuses: the recorded refusal of llama-cpp-python's server replayed, the
call sent once more in the alternative, the endpoint remembered (bounded), logged and counted once,
and a profile's own setting left alone."""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import pytest

from shared.provider_config import ProviderConfig
from tests.integration.helpers import metric_samples
from tests.peer import llama
from tests.support.llama_replay import recording_for
from worker import machine as m
from worker.core.policy import check_output
from worker.models.base import ModelCallError, StreamEnd, TextDelta
from worker.models.openai import OpenAIProvider
from worker.models.shapes import ShapeMemory, adapt, refused_shape
from worker.telemetry.metrics import MetricsObserver

REC = llama.load()
URL = "http://127.0.0.1:9/v1"


def replaying(seen: list[dict[str, Any]]) -> httpx.MockTransport:
    """llama-cpp-python's server as recorded: json_schema refused (500), json_object answered."""

    def handler(request: httpx.Request) -> httpx.Response:
        body = orjson.loads(request.content)
        seen.append(body)
        t = REC[recording_for(body)]
        return httpx.Response(t.status, headers={"content-type": t.content_type}, content=t.body)

    return httpx.MockTransport(handler)


def structured() -> m.ModelRequest:
    return m.ModelRequest(run_id="r", session_id=None, messages=llama.user("Pick a colour."), tools=[],
                          model_call_index=1, attempt=0, failures=0, response_format=llama.PICK_FORMAT)  # fmt: skip


async def answer(p: OpenAIProvider, req: m.ModelRequest) -> tuple[str, StreamEnd]:
    chunks = [c async for c in p.stream(req, {})]
    end = chunks[-1]
    assert isinstance(end, StreamEnd)
    return "".join(c.text for c in chunks if isinstance(c, TextDelta)), end


async def test_a_refused_response_format_is_sent_again_as_json_object_and_remembered() -> None:
    seen: list[dict[str, Any]] = []
    switched: list[str] = []
    memory = ShapeMemory(switched.append)
    cfg = llama.provider(URL)  # no responseFormatStyle: the default, OpenAI's json_schema
    assert "response_format_style" not in cfg.model_fields_set
    async with httpx.AsyncClient(transport=replaying(seen)) as client:
        p = OpenAIProvider(cfg, client, memory)
        text, end = await answer(p, structured())
        assert [b["response_format"]["type"] for b in seen] == ["json_schema", "json_object"]
        assert seen[1]["response_format"]["schema"] == llama.PICK
        assert end.finish_reason is not None
        value, problems = check_output(llama.PICK_FORMAT, text)
        assert problems == [] and set(value) == {"colour", "sure"}
        assert switched == ["response_format"] and memory.of(p.url) == {"response_format"}
        # the next call, and another profile's provider on the same endpoint, go out as json_object at once
        await answer(p, structured())
        await answer(OpenAIProvider(cfg, client, memory), structured())
    assert [b["response_format"]["type"] for b in seen[2:]] == ["json_object", "json_object"]
    assert switched == ["response_format"]  # logged and counted once


async def test_a_profile_that_sets_the_style_keeps_it_and_gets_the_refusal() -> None:
    seen: list[dict[str, Any]] = []
    cfg = llama.provider(URL, responseFormatStyle="openai")
    async with httpx.AsyncClient(transport=replaying(seen)) as client:
        p = OpenAIProvider(cfg, client, ShapeMemory())
        with pytest.raises(ModelCallError) as err:
            await answer(p, structured())
    assert len(seen) == 1 and err.value.failure.kind == "invalid"
    assert "response_format" in err.value.failure.message


async def test_content_parts_refused_go_out_as_one_string() -> None:
    seen: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        body = orjson.loads(request.content)
        seen.append(body)
        if any(not isinstance(msg["content"], str) for msg in body["messages"]):  # as FakeOpenAI(strict=True)
            return httpx.Response(500, json={"detail": "content: Input should be a valid string"})
        t = REC["chat_stream"]
        return httpx.Response(200, headers={"content-type": t.content_type}, content=t.body)

    memory = ShapeMemory()
    req = m.ModelRequest(run_id="r", session_id=None, messages=llama.with_image(llama.data_url(llama.png(4))),
                         tools=[], model_call_index=1, attempt=0, failures=0)  # fmt: skip
    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        _, end = await answer(OpenAIProvider(llama.provider(URL), client, memory), req)
    assert end.finish_reason is not None and len(seen) == 2
    assert seen[1]["messages"][-1]["content"] == f"{llama.IMAGE_PROMPT}[image]"
    assert memory.of(URL + "/chat/completions") == {"content_parts"}


@pytest.mark.parametrize(
    ("status", "message", "body", "shape"),
    [
        (
            500,
            REC["json_schema_refused"].body.decode(),
            REC["json_schema_refused"].request,
            "response_format",
        ),
        (
            400,
            "Invalid value for 'tool_choice': 'required' is not supported",
            {"tool_choice": "required"},
            "tool_choice",
        ),
        (400, "tool_choice: only auto is supported", {"tool_choice": {"type": "function"}}, "tool_choice"),
        (400, "tool_choice: only auto is supported", {"tool_choice": "auto"}, None),  # nothing to change
        (500, REC["null_content_500"].body.decode(), REC["null_content_500"].request, None),  # not a list
        (429, "response_format", REC["json_schema_refused"].request, None),  # not a refusal
        (400, "context length exceeded", REC["json_schema_refused"].request, None),
    ],
)
def test_refusals_are_recognised_by_the_field_they_name(
    status: int, message: str, body: dict[str, Any], shape: str | None
) -> None:
    assert refused_shape(status, message, body) == shape


def test_the_alternatives() -> None:
    one = [{"type": "function", "function": {"name": "calculator"}}]
    named = {"type": "function", "function": {"name": "calculator"}}
    assert (
        adapt({"tool_choice": "required", "tools": one}, frozenset({"tool_choice"}))["tool_choice"] == named
    )
    assert (
        adapt({"tool_choice": "required", "tools": one * 2}, frozenset({"tool_choice"}))["tool_choice"]
        == "auto"
    )
    assert (
        adapt({"tool_choice": named, "tools": one}, frozenset({"tool_choice"}))["tool_choice"] == "required"
    )
    body = {"response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": llama.PICK}}}
    assert adapt(body, frozenset({"response_format"})) == {"response_format": {"type": "json_object",
                                                                                "schema": llama.PICK}}  # fmt: skip
    assert adapt(body, frozenset({"response_format"}), keep=frozenset({"response_format"})) is body
    parts = {"messages": [{"role": "user", "content": [{"type": "text", "text": "look: "},
                                                        {"type": "image_url", "image_url": {"url": "x"}}]}]}  # fmt: skip
    assert adapt(parts, frozenset({"content_parts"}))["messages"][0]["content"] == "look: [image]"


def test_the_memory_is_bounded_and_counted_once_per_endpoint_and_shape() -> None:
    obs = MetricsObserver()
    memory = ShapeMemory(obs.shape_fallback, limit=2)
    for url in ("a", "b", "c"):
        memory.learn(url, "response_format", "HTTP 500")
    memory.learn("c", "response_format", "HTTP 500")
    assert memory.of("a") == frozenset() and memory.of("c") == {"response_format"}
    got = metric_samples(obs.render().decode())
    assert got[("agentmill_provider_shape_fallbacks_total", (("shape", "response_format"),))] == 3
    assert got[("agentmill_provider_shape_fallbacks_total", (("shape", "tool_choice"),))] == 0


def test_the_setting_is_only_an_override() -> None:
    assert (
        OpenAIProvider(ProviderConfig(kind="openai", base_url=URL, model="m"), httpx.AsyncClient()).keep
        == set()
    )
    styled = ProviderConfig(kind="openai", base_url=URL, model="m", response_format_style="json_object_schema",
                            image_parts="parts")  # fmt: skip
    assert OpenAIProvider(styled, httpx.AsyncClient()).keep == {"response_format", "content_parts"}


def test_fallbacks_are_counted_by_declared_agent_and_providers_only() -> None:
    obs = MetricsObserver(fallbacks=[("agent", "primary", "backup")])
    got = metric_samples(obs.render().decode())
    labels = (("agent", "agent"), ("from", "primary"), ("reason", "overloaded"), ("to", "backup"))
    assert got[("agentmill_model_fallbacks_total", labels)] == 0  # present from start-up
    obs.model_fallback("agent", "primary", "backup", "overloaded")
    obs.model_fallback("agent", "primary", "nowhere", "overloaded")  # no such step declared
    got = metric_samples(obs.render().decode())
    assert got[("agentmill_model_fallbacks_total", labels)] == 1
    other = tuple((k, "other") for k in ("agent", "from", "reason", "to"))
    assert got[("agentmill_model_fallbacks_total", other)] == 1


async def test_an_interrupted_stream_is_said_once_an_endpoint(caplog: pytest.LogCaptureFixture) -> None:
    """The recorded interruption of llama-cpp-python's server: [DONE] without a finish_reason."""
    t = REC["interrupted_stream"]

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": t.content_type}, content=t.body)

    req = m.ModelRequest(run_id="r", session_id=None, messages=llama.user("x"), tools=[], model_call_index=1,
                         attempt=0, failures=0)  # fmt: skip
    memory = ShapeMemory()
    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        p = OpenAIProvider(llama.provider(URL), client, memory)
        with caplog.at_level("WARNING", logger="agentmill.models"):
            for _ in range(2):
                _, end = await answer(p, req)
                assert end.finish_reason is None and end.done
            limited = OpenAIProvider(llama.provider(URL + "2", maxConcurrent=1), client, memory)
            await answer(limited, req)
    said = [r.getMessage() for r in caplog.records if "maxConcurrent: 1" in r.getMessage()]
    assert len(said) == 1 and p.url in said[0]
