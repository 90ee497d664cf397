"""Runs recorded through LiteLLM's Messages API proxy (tests/peer/test_anthropic_litellm.py, with
AGENTMILL_RECORD=1) replayed: a local server answers a real worker's anthropic-kind calls with the
recorded response bytes, in order. The run ends as it did (completed) with the recorded tool
calls, and every request the worker sends is the one recorded (the body, byte-stable prefix and all).

Also: the same run against a recording whose stream is cut before ``message_stop`` never
completes on it (the cut attempt is retried, and the retry's reply is the recorded one)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from redis.asyncio import Redis

from agentmill_client.models import EventKind
from shared.profiles import load_profiles
from tests.integration.helpers import assert_clean_stream, producer_for, running_worker, stream, wait_all
from tests.support import messages_replay
from tests.support.messages_replay import Exchange, Replayer

# The llama.cpp server recordings, and the forced run recorded through llama-cpp-python's server
# (llama-server reads the named tool_choice as auto; this server honoured it: the one recording of
# a forced choice that the upstream itself enforced).
NAMES = [*messages_replay.names(), "llama_cpp_python/forced_tool"]
KEY_ENV = "AGENTMILL_LITELLM_KEY"
SYSTEM = "You are a helpful assistant. Use the calculator tool for arithmetic."

pytestmark = pytest.mark.skipif(
    not messages_replay.names(), reason="no recordings in tests/data/anthropic_litellm"
)


def _recorded_calls(exchanges: list[Exchange]) -> list[tuple[str, dict[str, Any]]]:
    """The (name, input) of every call the recorded streams carried: its tool_use blocks' input
    fragments joined by call id (LiteLLM opens a block per fragment of a llama.cpp call)."""
    out = []
    for x in exchanges:
        ids: dict[int, str] = {}
        calls: dict[str, dict[str, Any]] = {}
        for line in x.body.splitlines():
            if not line.startswith(b"data:"):
                continue
            ev = orjson.loads(line[5:])
            if ev.get("type") == "content_block_start" and ev["content_block"]["type"] == "tool_use":
                ids[ev["index"]] = ev["content_block"]["id"]
                calls.setdefault(ids[ev["index"]], {"name": ev["content_block"]["name"], "json": ""})
            elif ev.get("type") == "content_block_delta" and ev["delta"]["type"] == "input_json_delta":
                calls[ids[ev["index"]]]["json"] += ev["delta"]["partial_json"]
        out += [(c["name"], orjson.loads(c["json"] or "{}")) for c in calls.values()]
    return out


async def _run(
    redis: Redis, redis_url: str, tmp_path: Path, run: dict[str, Any], server: Replayer
) -> tuple[Any, list[Any]]:
    path = tmp_path / "profiles.json"
    path.write_bytes(orjson.dumps({"profiles": [{
        "name": "claudish", **run.get("profile", {"systemPrompt": SYSTEM}), "tools": ["calculator"],
        "retry": {"maxRetries": 3, "baseDelayMs": 20, "maxDelayMs": 100},
        "provider": {**run["provider"], "baseUrl": server.base_url}}]}))  # fmt: skip
    p = producer_for(redis, redis_url)
    p.profiles = load_profiles(str(path))
    sub = await p.submit({"agent": "claudish", **run["input"]})
    async with running_worker(redis_url, profiles=str(path)):
        rec = (await wait_all(p, [sub.run_id], 60))[sub.run_id]  # type: ignore[union-attr]
    return rec, await stream(redis, sub.run_id)  # type: ignore[union-attr]


@pytest.mark.parametrize("name", NAMES)
async def test_a_recorded_run_replays_to_the_same_tool_calls(
    name: str, redis: Redis, redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_ENV, "sk-replay")
    run, exchanges = messages_replay.load(name)
    async with Replayer(exchanges) as server:
        rec, events = await _run(redis, redis_url, tmp_path, run, server)
    assert_clean_stream(events)
    # Every recorded run, toolChoice auto as well as forced, completed with a tool call, as it
    # does again here.
    assert (run["status"], rec.status.value) == ("completed", "completed"), rec.result
    calls = [
        (e.payload["name"], orjson.loads(e.payload["arguments"]))
        for e in events
        if e.kind == EventKind.TOOL_CALL
    ]
    assert calls and calls == _recorded_calls(exchanges)
    assert server.seen == [x.request for x in exchanges]  # what agentmill sends has not drifted


async def test_a_stream_cut_before_message_stop_is_retried_never_an_answer(
    redis: Redis, redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_ENV, "sk-replay")
    completed = [n for n in NAMES if messages_replay.load(n)[0]["status"] == "completed"]
    run, exchanges = messages_replay.load(completed[0])
    first = exchanges[0]
    cut = Exchange(
        first.request, 200, first.content_type, first.body[: first.body.index(b"event: message_delta")]
    )
    async with Replayer([cut, *exchanges]) as server:
        rec, events = await _run(redis, redis_url, tmp_path, run, server)
    assert rec.status.value == "completed", rec.result
    retries = [e for e in events if e.kind == EventKind.STATUS and e.payload.get("status") == "retrying"]
    assert [r.payload.get("reason") for r in retries] == ["truncated"]
    assert server.seen[0] == server.seen[1]  # the retry asked the same


async def test_thinking_blocks_go_back_unchanged_and_cache_usage_adds_up(
    redis: Redis, redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker run on recorded API streams: thinking + a tool call, then an answer whose usage
    read and wrote the prompt cache. The second request carries the first reply's thinking blocks
    as received, before its tool_use; the run's usage counts the cached tokens inside inputTokens."""
    monkeypatch.setenv(KEY_ENV, "sk-replay")
    api = Path(__file__).resolve().parents[1] / "data" / "anthropic"
    replies = [
        Exchange({}, 200, "text/event-stream", (api / name).read_bytes())
        for name in ("thinking_tool_use.sse", "cache_usage.sse")
    ]
    run = {"provider": {"kind": "anthropic", "model": "claude-x", "apiKeyEnv": KEY_ENV, "thinking": {"budgetTokens": 2048}},
           "input": {"inputMessages": [{"role": "user", "content": "What is 17 * 23?"}]}}  # fmt: skip
    async with Replayer(replies) as server:
        rec, events = await _run(redis, redis_url, tmp_path, run, server)
    assert rec.status.value == "completed", rec.result
    assert server.seen[0]["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    reply = server.seen[1]["messages"][1]
    assert reply["role"] == "assistant"
    assert [b["type"] for b in reply["content"]] == ["thinking", "redacted_thinking", "tool_use"]
    assert reply["content"][0]["signature"].startswith("EqQBCgIYAhIM") and reply["content"][1][
        "data"
    ].startswith("EmwK")
    results = [e.payload for e in events if e.kind == EventKind.TOOL_RESULT]
    assert results and "391" in results[0]["content"]
    assert rec.result is not None and rec.result.usage is not None
    u = rec.result.usage
    assert (u.input_tokens, u.output_tokens, u.cache_read_tokens, u.cache_write_tokens) == (
        530 + 12 + 1200 + 3400,
        146 + 21,
        3400,
        1200,
    )
