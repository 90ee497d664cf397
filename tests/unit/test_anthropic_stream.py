"""Differential parsing: the same Anthropic SSE bytes through the official ``anthropic`` SDK's
stream accumulator (``client.messages.stream(...).get_final_message()``) and through agentmill's
reader (worker/models/anthropic_stream.py) give the same text, tool calls, thinking blocks, stop
reason and usage (cache fields included), for every stream under tests/data/anthropic/ and
tests/data/anthropic_litellm/ (LiteLLM's proxy in front of llama-server, and under llama_cpp_python/
in front of llama-cpp-python's server), whole and split at arbitrary byte boundaries."""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentmill_client.models import Usage
from worker.models.anthropic import read_events
from worker.models.anthropic_stream import STOP_REASONS, MessageReader
from worker.models.base import ModelCallError, StreamEnd, TextDelta, ThinkingDone, ToolCallDelta
from worker.models.sse import SseParser

DATA = Path(__file__).resolve().parents[1] / "data"
ALL = sorted([*(DATA / "anthropic").glob("*.sse"), *(DATA / "anthropic_litellm").rglob("*.sse")])


def _repeats_an_id(raw: bytes) -> bool:
    """A reply that opens several tool_use blocks under one id (LiteLLM's proxy streaming a
    llama-cpp-python tool call: a block per fragment). The API never does."""
    ids = [ev["content_block"]["id"] for ev in _events(raw)
           if ev.get("type") == "content_block_start" and ev["content_block"]["type"] == "tool_use"]  # fmt: skip
    return len(ids) != len(set(ids))


def _events(raw: bytes) -> list[dict[str, Any]]:
    return [json.loads(line[5:]) for line in raw.splitlines() if line.startswith(b"data:")]


STREAMS = [p for p in ALL if not _repeats_an_id(p.read_bytes())]
QUIRKS = [p for p in ALL if _repeats_an_id(p.read_bytes())]


@dataclass
class Parsed:
    text: str = ""
    calls: list[tuple[str, str, Any]] = field(default_factory=list)  # (id, name, input)
    thinking: list[dict[str, str | None]] = field(default_factory=list)
    stop_reason: str | None = None
    usage: dict[str, int] = field(default_factory=dict)
    error: str | None = None  # the error event's type


def _chunks(raw: bytes, cuts: list[int]) -> list[bytes]:
    edges = [0, *sorted(set(cuts)), len(raw)]
    return [raw[a:b] for a, b in itertools.pairwise(edges) if b > a]


def by_sdk(chunks: list[bytes]) -> Parsed:
    import anthropic  # here, not at the top: ~2.5 s of CPU that every pytest process paid to collect

    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=iter(chunks))

    http = httpx2.Client(transport=httpx2.MockTransport(handler))
    client = anthropic.Anthropic(api_key="test", base_url="http://sdk.test", http_client=http, max_retries=0)
    out = Parsed()
    try:
        with client.messages.stream(
            model="m", max_tokens=64, messages=[{"role": "user", "content": "hi"}]
        ) as stream:
            msg = stream.get_final_message()
    except anthropic.APIStatusError as exc:
        body = exc.body if isinstance(exc.body, dict) else {}
        out.error = str((body.get("error") or {}).get("type"))
        return out
    finally:
        http.close()
    for b in msg.content:
        if b.type == "text":
            out.text += b.text
        elif b.type == "tool_use":
            out.calls.append((b.id, b.name, b.input))
        elif b.type == "thinking":
            out.thinking.append({"type": "thinking", "thinking": b.thinking, "signature": b.signature})
        elif b.type == "redacted_thinking":
            out.thinking.append({"type": "redacted_thinking", "data": b.data})
    out.stop_reason = msg.stop_reason
    u = msg.usage
    out.usage = {
        "input_tokens": u.input_tokens,
        "output_tokens": u.output_tokens,
        "cache_read_input_tokens": u.cache_read_input_tokens or 0,
        "cache_creation_input_tokens": u.cache_creation_input_tokens or 0,
    }
    return out


def by_agentmill(chunks: list[bytes]) -> tuple[Parsed, StreamEnd | None]:
    reader, parser = MessageReader(), SseParser()
    got: list[Any] = []
    out = Parsed()
    try:
        for c in [*chunks, b""]:
            got.extend(read_events(reader, parser, c))
    except ModelCallError as exc:
        out.error = {400: "invalid_request_error", 429: "rate_limit_error", 500: "api_error",
                     529: "overloaded_error"}.get(exc.failure.status or 0, exc.failure.kind)  # fmt: skip
        return out, None
    calls: dict[int, dict[str, str]] = {}
    for ch in got:
        if isinstance(ch, TextDelta):
            out.text += ch.text
        elif isinstance(ch, ToolCallDelta):
            slot = calls.setdefault(ch.index, {"id": "", "name": "", "arguments": ""})
            slot["id"] = slot["id"] or (ch.id or "")
            slot["name"] = slot["name"] or (ch.name or "")
            slot["arguments"] += ch.arguments
        elif isinstance(ch, ThinkingDone):
            out.thinking.append(ch.block.model_dump(exclude_none=True))
    out.calls = [(c["id"], c["name"], json.loads(c["arguments"] or "{}")) for _, c in sorted(calls.items())]
    out.stop_reason = reader.stop_reason
    u = reader.usage
    out.usage = {k: u.get(k, 0) for k in ("input_tokens", "output_tokens", "cache_read_input_tokens",
                                          "cache_creation_input_tokens")}  # fmt: skip
    return out, reader.end()


def _same(raw: bytes, cuts: list[int]) -> tuple[Parsed, StreamEnd | None]:
    chunks = _chunks(raw, cuts)
    sdk = by_sdk(chunks)
    ours, end = by_agentmill(chunks)
    assert ours == sdk
    return ours, end


@pytest.mark.parametrize("path", STREAMS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_stored_stream_parses_as_the_sdk_does(path: Path) -> None:
    raw = path.read_bytes()
    ours, end = _same(raw, [])
    _same(raw, list(range(1, len(raw))))  # a byte at a time
    if ours.error is None:
        assert end is not None
        stopped = b"message_stop" in raw
        # a finish reason only at message_stop: a stream cut before it is never an answer
        assert (end.finish_reason is not None) == stopped
        if stopped:
            assert end.finish_reason == STOP_REASONS.get(ours.stop_reason or "", ours.stop_reason)


def test_the_stored_streams_cover_what_the_reader_must_read() -> None:
    raws = {p.name: p.read_bytes() for p in STREAMS}
    every = b"".join(raws.values())
    for needle in (b"input_json_delta", b"signature_delta", b"redacted_thinking", b"event: error",
                   b'"max_tokens"', b"cache_read_input_tokens\":3400", b"event: ping", b"\r\n"):  # fmt: skip
        assert needle in every, needle
    parallel, _ = by_agentmill([raws["tool_use_parallel.sse"]])
    assert [c[2] for c in parallel.calls] == [
        {"location": "San Francisco, CA", "unit": "celsius"},
        {"location": "Paris, France"},
    ]


def test_usage_counts_cached_tokens_inside_input_tokens() -> None:
    _, end = by_agentmill([(DATA / "anthropic" / "cache_usage.sse").read_bytes()])
    assert end is not None and end.finish_reason == "stop"
    assert end.usage == Usage(input_tokens=12 + 1200 + 3400, output_tokens=21, cache_read_tokens=3400,
                              cache_write_tokens=1200)  # fmt: skip


def test_thinking_blocks_come_back_whole_with_their_signatures() -> None:
    ours, end = by_agentmill([(DATA / "anthropic" / "thinking_tool_use.sse").read_bytes()])
    assert [b["type"] for b in ours.thinking] == ["thinking", "redacted_thinking"]
    assert str(ours.thinking[0]["signature"]).startswith("EqQB")
    assert end is not None and end.finish_reason == "tool_calls"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_streams_split_anywhere_parse_as_the_sdk_does(data: st.DataObject) -> None:
    path = data.draw(st.sampled_from(STREAMS), label="stream")
    raw = path.read_bytes()
    cuts = data.draw(st.lists(st.integers(1, max(1, len(raw) - 1)), max_size=40), label="cuts")
    _same(raw, cuts)


@pytest.mark.parametrize("path", QUIRKS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_tool_use_blocks_repeating_an_id_are_one_call(path: Path) -> None:
    """The official SDK's accumulator takes each block as a call of its own and fails on the first
    fragment that is no JSON; agentmill joins the fragments of one id into one call."""
    raw = path.read_bytes()
    frags: dict[str, str] = {}
    current: dict[int, str] = {}
    for ev in _events(raw):
        if ev.get("type") == "content_block_start" and ev["content_block"]["type"] == "tool_use":
            current[ev["index"]] = ev["content_block"]["id"]
            frags.setdefault(current[ev["index"]], "")
        elif ev.get("type") == "content_block_delta" and ev["delta"]["type"] == "input_json_delta":
            frags[current[ev["index"]]] += ev["delta"]["partial_json"]
    for cuts in ([], list(range(1, len(raw), 7))):
        ours, end = by_agentmill(_chunks(raw, cuts))
        assert [(c[0], c[2]) for c in ours.calls] == [(i, json.loads(f)) for i, f in frags.items()]
        assert end is not None and end.finish_reason == "tool_calls"
