"""The anthropic provider against a Messages API server we did not write: LiteLLM's proxy serving
``/v1/messages`` in front of llama.cpp's own ``llama-server --jinja`` (Gemma 3 270M).

First the official ``anthropic`` SDK drives the proxy (a plain call and one with a tool call and its
result, streamed), to show the server is one the SDK takes. Then tool-using runs go agentmill →
recorder → LiteLLM → llama-server, with ``toolChoice`` auto and forced. ``AGENTMILL_RECORD=1`` writes their exchanges to
tests/data/anthropic_litellm/ (tests/integration/test_anthropic_replay.py replays them in CI, and
tests/unit/test_anthropic_stream.py parses their streams against the SDK's).

Installed by bin/peers/llama.sh and bin/peers/litellm.sh.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import orjson
import pytest
from redis.asyncio import Redis

from agentmill_client.models import EventKind
from shared.profiles import load_profiles
from tests.integration.helpers import assert_clean_stream, producer_for, running_worker, stream, wait_all
from tests.peer import litellm, llama
from tests.support import messages_replay

pytestmark = [
    pytest.mark.peer,
    pytest.mark.timeout(900),
    pytest.mark.skipif(
        llama.server_installed() is None, reason="llama-server not installed: run bin/peers/llama.sh"
    ),
    pytest.mark.skipif(litellm.installed() is None, reason="LiteLLM not installed: run bin/peers/litellm.sh"),
]
KEY_ENV = "AGENTMILL_LITELLM_KEY"
CALCULATOR = {
    "name": "calculator",
    "description": "Evaluate an arithmetic expression.",
    "input_schema": {
        "type": "object",
        "properties": {"expression": {"type": "string"}},
        "required": ["expression"],
    },
}
# What the replay runs again: the profile's provider (baseUrl set per run) and the RunInput, and
# how the run ends. The call, then (loopLimits.maxIterations 1) one last call without tools for the
# answer. llama-server streams a call under "auto" (its grammar starts at the template's
# <tool_call>); it reads the named form of tool_choice, which LiteLLM sends for the forced run, as
# "auto" (a warning in its log), so both ask the model to choose.
RUNS: dict[str, dict[str, Any]] = {
    "forced_tool": {"toolChoice": {"type": "function", "function": {"name": "calculator"}}},
    "auto_tool": {"toolChoice": "auto"},
}
ASK = {"inputMessages": [{"role": "user", "content": "What is 17 * 23? Use the calculator tool."}],
       "loopLimits": {"maxIterations": 1}}  # fmt: skip


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[litellm.LiteLLMProxy]:
    work = tmp_path_factory.mktemp("litellm")
    server = llama.LlamaCppServer(work / "llama.log").start()
    try:
        p = litellm.LiteLLMProxy(server.base_url, work, GEMMA_PARAMS).start()
        try:
            yield p
        finally:
            p.stop()
    finally:
        server.stop()


def provider(base_url: str, **kw: Any) -> dict[str, Any]:
    return {"kind": "anthropic", "baseUrl": base_url, "model": litellm.MODEL, "apiKeyEnv": KEY_ENV,
            "temperature": 0, "maxTokens": 256, "readTimeoutS": 300, "maxConcurrent": 1,
            # no cache_control blocks (the cache is the API's): every message of one text block
            # goes out as a plain string
            "promptCaching": False, **kw}  # fmt: skip


# Sent with every request, for Gemma 3 270M (a base model: it repeats its prompt and never ends a
# turn of its own): one call per reply (allowed more, it repeats the call until max_tokens), and a
# reply ends at its first blank line (the template puts the call's opening tag before any).
GEMMA_PARAMS = '      parallel_tool_calls: false\n      stop: ["\\n\\n"]\n'
# Without the built-in preamble (a thousand characters of rules): Gemma 270M begins its reply by
# repeating its prompt, and reaches the tool call's opening tag within max_tokens only when the
# prompt is short.
PROFILE = {"systemPrompt": llama.SYSTEM, "preamble": "off"}


def profiles_file(path: Path, prov: dict[str, Any]) -> Path:
    path.write_bytes(orjson.dumps({"profiles": [{
        "name": "claudish", **PROFILE, "tools": ["calculator"],
        "retry": {"maxRetries": 3, "baseDelayMs": 200, "maxDelayMs": 1000}, "provider": prov}]}))  # fmt: skip
    return path


def test_the_official_sdk_takes_the_proxy(proxy: litellm.LiteLLMProxy) -> None:
    client = anthropic.Anthropic(
        api_key=litellm.MASTER_KEY, base_url=proxy.base_url, max_retries=0, timeout=300
    )
    with client.messages.stream(
        model=litellm.MODEL, max_tokens=24, messages=[{"role": "user", "content": "Name a colour."}]
    ) as s:
        plain = s.get_final_message()
    assert plain.role == "assistant" and plain.stop_reason in ("end_turn", "max_tokens")
    assert any(b.type == "text" and b.text for b in plain.content)
    assert plain.usage.input_tokens > 0 and plain.usage.output_tokens > 0
    # A conversation with a call and its result, in the Messages API's shapes, streamed back.
    with client.messages.stream(
        model=litellm.MODEL, max_tokens=24, tools=[CALCULATOR],  # type: ignore[list-item]
        messages=[
            {"role": "user", "content": "What is 17 * 23?"},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "toolu_1", "name": "calculator", "input": {"expression": "17 * 23"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "391"}]},
        ],
    ) as s:  # fmt: skip
        after = s.get_final_message()
    assert after.role == "assistant" and after.stop_reason in ("end_turn", "max_tokens", "tool_use")


async def _run(
    proxy: litellm.LiteLLMProxy, redis: Redis, redis_url: str, tmp_path: Path, kw: dict[str, Any],
    cut: frozenset[int] = frozenset(),
) -> tuple[Any, list[Any], list[messages_replay.Exchange]]:  # fmt: skip
    """A run of ``ASK`` through a recorder in front of the proxy: its record, events and exchanges."""
    async with (
        httpx.AsyncClient(timeout=300) as client,
        messages_replay.Recorder(proxy.base_url, client, cut) as rec,
    ):
        path = profiles_file(tmp_path / "profiles.json", provider(rec.base_url, **kw))
        p = producer_for(redis, redis_url)
        p.profiles = load_profiles(str(path))
        sub = await p.submit({"agent": "claudish", **ASK})
        async with running_worker(redis_url, profiles=str(path)):
            done = (await wait_all(p, [sub.run_id], 600))[sub.run_id]  # type: ignore[union-attr]
        events = await stream(redis, sub.run_id)  # type: ignore[union-attr]
    assert_clean_stream(events)
    return done, events, rec.exchanges


@pytest.mark.parametrize("name", sorted(RUNS))
async def test_tool_using_runs_complete_through_litellm(
    name: str, proxy: litellm.LiteLLMProxy, redis: Redis, redis_url: str, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.setenv(KEY_ENV, litellm.MASTER_KEY)
    kw = RUNS[name]
    done, events, exchanges = await _run(proxy, redis, redis_url, tmp_path, kw)
    calls = [e.payload for e in events if e.kind == EventKind.TOOL_CALL]
    if os.environ.get("AGENTMILL_RECORD") == "1":
        run = {"profile": PROFILE, "provider": provider("", **kw), "input": ASK, "status": done.status.value}
        messages_replay.save(name, run, exchanges)
    assert all(x.status == 200 and b"message_stop" in x.body for x in exchanges)
    assert done.status.value == "completed", (done.result, [x.status for x in exchanges])
    assert calls and calls[0]["name"] == "calculator"
    assert orjson.loads(calls[0]["arguments"]).get("expression")
    assert done.result is not None and done.result.final_assistant_message is not None
    assert done.result.final_assistant_message.content


async def test_a_cut_stream_is_retried_never_taken_as_the_answer(
    proxy: litellm.LiteLLMProxy, redis: Redis, redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first reply (the model's tool call) reaches the worker without its message_delta and
    message_stop: the worker retries the call, and the run goes on from the retry's reply."""
    monkeypatch.setenv(KEY_ENV, litellm.MASTER_KEY)
    done, events, exchanges = await _run(proxy, redis, redis_url, tmp_path, RUNS["auto_tool"], frozenset({0}))
    assert b"tool_use" in exchanges[0].body and b"message_stop" not in exchanges[0].body
    retries = [
        e.payload.get("reason")
        for e in events
        if e.kind == EventKind.STATUS and e.payload.get("status") == "retrying"
    ]
    assert retries == ["truncated"]
    assert exchanges[1].request == exchanges[0].request
    calls = [e.payload for e in events if e.kind == EventKind.TOOL_CALL]
    assert done.status.value == "completed" and len(calls) == 1, done.result
