"""Transcripts recorded from llama-cpp-python's server (tests/data/llama_cpp/, written by
tests/peer/test_llama_server.py with AGENTMILL_RECORD=1) replayed byte for byte through the
provider, and what the machine makes of each."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import jsonschema
import orjson
import pytest

from agentmill_client.models import EventKind, Message, ToolCall
from agentmill_client.statuses import RunStatus
from tests.peer import llama
from tests.unit.machine_driver import T0, calling, config, go
from worker import machine as m
from worker.core.policy import CUT_OFF_CALL, classify
from worker.models.base import ModelCallError, ReasoningDelta, StreamEnd, TextDelta, ToolCallDelta
from worker.models.openai import OpenAIProvider

REC = llama.load()


class Replay(httpx.AsyncByteStream):
    def __init__(self, body: bytes, broke: str) -> None:
        self.body, self.broke = body, broke

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for i in range(0, len(self.body), 97):  # split anywhere, as the network does
            yield self.body[i : i + 97]
        if self.broke:
            raise getattr(httpx, self.broke)("recorded: the server dropped the connection")


async def replay(name: str) -> tuple[str, list[ToolCall], StreamEnd, dict]:
    t = REC[name]
    seen: list[dict] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(orjson.loads(request.content))
        return httpx.Response(
            t.status, headers={"content-type": t.content_type}, stream=Replay(t.body, t.broke)
        )

    cfg = llama.provider("http://127.0.0.1:9/v1").model_copy(
        update={"tool_choice": t.request.get("tool_choice")}
    )
    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        p = OpenAIProvider(cfg, client)
        req = m.ModelRequest(run_id="r", session_id=None, messages=[Message(role="user", content="x")], tools=[],
                             model_call_index=1, attempt=0, failures=0)  # fmt: skip
        chunks = [c async for c in p.stream(req, {})]
    text = "".join(c.text for c in chunks if isinstance(c, TextDelta))
    assert not any(isinstance(c, ReasoningDelta) for c in chunks)
    calls: dict[int, dict[str, str]] = {}
    for c in chunks:
        if isinstance(c, ToolCallDelta):
            slot = calls.setdefault(c.index, {"id": "", "name": "", "arguments": ""})
            slot["id"] = slot["id"] or (c.id or "")
            slot["name"] = slot["name"] or (c.name or "")
            slot["arguments"] += c.arguments
    end = chunks[-1]
    assert isinstance(end, StreamEnd)
    return text, [ToolCall(**v) for _, v in sorted(calls.items())], end, seen[0]


def decided(text: str, calls: list[ToolCall], end: StreamEnd) -> tuple[m.RunState, list[m.Command]]:
    msg = Message(role="assistant", content=text, tool_calls=calls or None)
    s = calling(config(tools=[llama.calculator()]))
    return go(s, m.ModelStreamOpened(T0), m.ModelReplied(T0, msg, end.usage, end.finish_reason, 0.5, True))


def test_the_recordings_answer_the_requests_agentmill_sends_today() -> None:
    """Each recorded request is what request_body builds now (the 500's differs only by its null)."""
    plain = llama.provider("http://x", maxTokens=48)
    assert REC["chat_stream"].request == llama.body(plain, llama.user("Name a colour."))
    forced = llama.provider("http://x", toolChoice=llama.FORCED)
    assert REC["tool_call_stream"].request == llama.body(
        forced, llama.user("What is 6*7?"), [llama.calculator()]
    )
    sent = REC["null_content_500"].request
    ours = llama.body(forced, [Message(role=x["role"], content=x["content"] or "", tool_call_id=x.get("tool_call_id"),
                                       tool_calls=[ToolCall(id=c["id"], name=c["function"]["name"],
                                                            arguments=c["function"]["arguments"])
                                                   for c in x.get("tool_calls", [])] or None,
                                       name="calculator" if x["role"] == "tool" else None)
                               for x in sent["messages"]], [llama.calculator()])  # fmt: skip
    assert ours["messages"][2]["content"] == "" and sent["messages"][2]["content"] is None
    ours["messages"][2]["content"] = None
    assert ours == sent


async def test_a_recorded_chat_stream_completes_with_the_whole_answer() -> None:
    text, calls, end, _ = await replay("chat_stream")
    assert (text, calls, end.finish_reason, end.done) == ("Name a colour.", [], "stop", True)
    s, _ = decided(text, calls, end)
    assert s.phase == RunStatus.COMPLETED and s.final_message is not None
    assert s.final_message.content == "Name a colour."


async def test_a_recorded_tool_call_stream_runs_the_calculator_once() -> None:
    """The server repeats each fragment in the legacy function_call field: counted once."""
    text, calls, end, _ = await replay("tool_call_stream")
    assert REC["tool_call_stream"].request["tool_choice"] == llama.FORCED
    assert text == "" and end.finish_reason == "tool_calls" and len(calls) == 1
    assert calls[0].name == "calculator" and calls[0].id.startswith("call__0_calculator_")
    assert isinstance(orjson.loads(calls[0].arguments)["expression"], str)
    _, cmds = decided(text, calls, end)
    assert [c.call.name for c in cmds if isinstance(c, m.ExecuteTool)] == ["calculator"]


async def test_a_recorded_interrupted_stream_is_retried_not_completed() -> None:
    """Interrupted by a newer request, the server sends [DONE] without a finish_reason, then drops
    the connection."""
    assert REC["interrupted_stream"].broke == "RemoteProtocolError"
    text, calls, end, _ = await replay("interrupted_stream")
    assert text and end.finish_reason is None and end.done is True
    s, cmds = decided(text, calls, end)
    assert s.node == m.RETRYING and s.final_message is None
    reasons = [c.payload.get("reason") for c in cmds if isinstance(c, m.Emit) and c.kind == EventKind.STATUS]
    assert reasons == ["truncated", "truncated"]  # model_call_discarded, retrying


@pytest.mark.parametrize("name", ["empty_stream_auto", "auto_tool_broken_stream"])
async def test_recorded_empty_streams_under_tool_choice_auto_are_retried(name: str) -> None:
    text, calls, end, _ = await replay(name)
    assert REC[name].request["tool_choice"] == "auto" and text == "" and calls == []
    s, cmds = decided(text, calls, end)
    assert s.node == m.RETRYING
    retry = next(c.payload for c in cmds if isinstance(c, m.Emit) and c.payload.get("status") == "retrying")
    assert retry["reason"] == ("empty" if name == "empty_stream_auto" else "truncated")


async def test_the_recorded_500_for_null_content_fails_at_once_with_the_reason() -> None:
    """The server answers a body it cannot validate with a 500: retrying the same body cannot help."""
    with pytest.raises(ModelCallError) as exc:
        await replay("null_content_500")
    f = exc.value.failure
    assert (f.kind, f.status, classify(f)) == ("invalid", 500, "fatal")
    assert "'content'), 'msg': 'Input should be a valid string', 'input': None" in f.message


def test_cut_off_call_text_is_what_the_model_reads() -> None:
    assert CUT_OFF_CALL.startswith("error:") and "not executed" in CUT_OFF_CALL


async def test_a_recorded_structured_answer_completes_with_its_output() -> None:
    """The schema sent as llama-cpp-python's json_object schema: its grammar makes Gemma answer JSON,
    which the machine validates and returns parsed."""
    grammar = llama.provider("http://x", maxTokens=96, responseFormatStyle="json_object_schema")
    sent = REC["structured_stream"].request
    assert sent == llama.body(grammar, llama.user(llama.STRUCTURED_PROMPT), None, llama.PICK_FORMAT)
    assert sent["response_format"] == {"type": "json_object", "schema": llama.PICK}
    text, calls, end, _ = await replay("structured_stream")
    assert calls == [] and end.finish_reason == "stop"
    s, cmds = go(calling(config(response_format=llama.PICK_FORMAT)), m.ModelStreamOpened(T0),
                 m.ModelReplied(T0, Message(role="assistant", content=text), end.usage, end.finish_reason))  # fmt: skip
    assert s.phase == RunStatus.COMPLETED and s.repairs == 0, text
    jsonschema.validate(s.output, llama.PICK)
    assert next(c for c in cmds if isinstance(c, m.Finish)).result.output == orjson.loads(text)


async def test_the_recorded_refusal_of_openais_json_schema_shape_fails_at_once() -> None:
    """llama-cpp-python 0.3.36 takes response_format type text or json_object only: OpenAI's
    json_schema is a 500 with a validation error, not retried (use responseFormatStyle)."""
    assert REC["json_schema_refused"].request["response_format"]["type"] == "json_schema"
    with pytest.raises(ModelCallError) as exc:
        await replay("json_schema_refused")
    f = exc.value.failure
    assert (f.kind, f.status, classify(f)) == ("invalid", 500, "fatal")
    assert "response_format" in f.message and "json_object" in f.message


async def test_a_recorded_text_and_image_message_is_accepted_and_completes() -> None:
    """The request carries a text part and an image_url part (a 1 × 1 PNG as a data: URL),
    exactly as agentmill sends it today; the server answers 200 and the run completes (Gemma 270M
    is text-only: the answer ignores the image)."""
    sent = REC["image_parts_stream"].request
    assert sent == llama.body(llama.provider("http://x", maxTokens=48), llama.with_image(llama.TINY))
    assert [p["type"] for p in sent["messages"][0]["content"]] == ["text", "image_url"]
    assert sent["messages"][0]["content"][1]["image_url"]["url"].startswith("data:image/png;base64,")
    assert REC["image_parts_stream"].status == 200
    text, calls, end, _ = await replay("image_parts_stream")
    assert text and calls == [] and end.finish_reason in ("stop", "length")
    s, _ = decided(text, calls, end)
    assert s.phase == RunStatus.COMPLETED and s.final_message is not None and s.final_message.content == text


async def test_a_recorded_photo_sized_image_as_parts_is_an_empty_stream_retried() -> None:
    """The chatml template puts the list of parts into the prompt as text: a 4.8 kB PNG's base64 is
    more tokens than Gemma's 2048-token context, and while streaming the server has already said 200:
    the body is empty. The machine retries it as a truncation (use ``imageParts: "placeholder"``)."""
    sent = REC["image_parts_overflow"].request
    assert sent == llama.body(llama.provider("http://x", maxTokens=48), llama.with_image(llama.PHOTO))
    assert (REC["image_parts_overflow"].status, REC["image_parts_overflow"].body) == (200, b"")
    text, calls, end, _ = await replay("image_parts_overflow")
    assert (text, calls, end.finish_reason) == ("", [], None)
    s, cmds = decided(text, calls, end)
    assert s.node == m.RETRYING and s.final_message is None
    retry = next(c.payload for c in cmds if isinstance(c, m.Emit) and c.payload.get("status") == "retrying")
    assert retry["reason"] == "truncated"


async def test_a_recorded_photo_sent_as_a_placeholder_completes() -> None:
    """``imageParts: "placeholder"``: the same message goes out as one string, the image as
    ``[image]`` and no image data; the server answers it."""
    cfg = llama.provider("http://x", maxTokens=48, imageParts="placeholder")
    sent = REC["image_placeholder_stream"].request
    assert sent == llama.body(cfg, llama.with_image(llama.PHOTO))
    assert sent["messages"][0] == {"role": "user", "content": f"{llama.IMAGE_PROMPT}\n[image]"}
    text, calls, end, _ = await replay("image_placeholder_stream")
    assert text and end.finish_reason in ("stop", "length")
    s, _ = decided(text, calls, end)
    assert s.phase == RunStatus.COMPLETED
