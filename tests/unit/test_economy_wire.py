"""worker/economy/wire.py: a model call as a batch request of its provider's kind, and the batch's
answer read back as the standard lane reads the stream of it."""

from __future__ import annotations

import re

import orjson

from shared.provider_config import ProviderConfig
from worker.economy.wire import batch_endpoint, reply_of, wire_custom_id

ANTHROPIC_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


def test_a_message_is_read_with_its_thinking_tool_calls_and_cache_usage() -> None:
    body = {
        "type": "message",
        "content": [
            {"type": "thinking", "thinking": "let me see", "signature": "sig"},
            {"type": "text", "text": "calling"},
            {"type": "tool_use", "id": "toolu_1", "name": "calc", "input": {"a": 1}},
            {"type": "tool_use", "id": "toolu_2", "name": "echo", "input": {}},
        ],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 7, "output_tokens": 5, "cache_read_input_tokens": 100,
                  "cache_creation_input_tokens": 20},
    }  # fmt: skip
    text, calls, thinking, end = reply_of("anthropic", body)
    assert "".join(text) == "calling"
    assert calls[0] == {"id": "toolu_1", "name": "calc", "arguments": '{"a":1}'}
    assert calls[1] == {"id": "toolu_2", "name": "echo", "arguments": "{}"}
    assert [(b.thinking, b.signature) for b in thinking] == [("let me see", "sig")]
    assert end.finish_reason == "tool_calls" and end.usage is not None
    assert (end.usage.input_tokens, end.usage.cache_read_tokens, end.usage.cache_write_tokens) == (
        127,
        100,
        20,
    )
    assert end.usage.output_tokens == 5


def test_a_chat_completion_is_read_as_before() -> None:
    body = {
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "hi"}}],
        "usage": {"prompt_tokens": 11, "completion_tokens": 5, "total_tokens": 16},
    }
    text, calls, thinking, end = reply_of("openai", body)
    assert (text, calls, thinking, end.finish_reason) == (["hi"], {}, [], "stop")
    assert end.usage is not None and end.usage.input_tokens == 11


def test_custom_ids_are_ones_anthropic_takes_and_distinct() -> None:
    cids = ["run_ab12:3", "my:weird id/é:1", "x" * 80 + ":2", "h-1:1", "a-1:1"]
    wired = [wire_custom_id(c) for c in cids]
    assert wired[0] == "run_ab12-3"
    assert all(ANTHROPIC_ID.fullmatch(w) for w in wired)
    assert len(set(wired)) == len(wired)
    assert orjson.loads(orjson.dumps(wired)) == wired


def test_one_base_url_is_two_endpoints_for_two_kinds() -> None:
    base = "http://127.0.0.1:9/v1"
    openai = ProviderConfig(kind="openai", base_url=base, model="m")
    anthropic = ProviderConfig(kind="anthropic", base_url=base, model="m", max_tokens=10)
    assert batch_endpoint(openai) != batch_endpoint(anthropic)
