"""The anthropic provider against a Messages API server we did not write: LiteLLM's proxy serving
``/v1/messages`` in front of the llama.cpp peer (llama-cpp-python, Gemma 3 270M).

First the official ``anthropic`` SDK drives the proxy (a plain and a tool-forced call, streamed),
to show the server is one the SDK takes. Then tool-using runs go agentmill → recorder → LiteLLM →
llama, with ``toolChoice`` auto and forced. ``AGENTMILL_RECORD=1`` writes their exchanges to
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
        llama.installed() is None, reason="llama-cpp-python not installed: run bin/peers/llama.sh"
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
# how the run ends. Forced: the call, then (loopLimits.maxIterations 1) one last call without tools
# for the answer. Auto: LiteLLM sends llama tool_choice "auto" with the tools and the system prompt,
# but llama-cpp-python 0.3.36's chatml-function-calling cannot answer it streamed: a text answer is
# held by its grammar to a tool's name or the end (always empty), and a tool call raises "Automatic
# streaming tool choice is not supported" after the 200 OK (tests/data/llama_cpp:
# empty_stream_auto, auto_tool_broken_stream). LiteLLM passes either on as an empty text block with
# end_turn; agentmill retries each as an empty answer and the run fails, never completes on one.
RUNS: dict[str, tuple[dict[str, Any], str]] = {
    "forced_tool": ({"toolChoice": {"type": "function", "function": {"name": "calculator"}}}, "completed"),
    "auto_tool": ({"toolChoice": "auto"}, "failed"),
}
ASK = {"inputMessages": [{"role": "user", "content": "What is 17 * 23? Use the calculator tool."}],
       "loopLimits": {"maxIterations": 1}}  # fmt: skip


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[litellm.LiteLLMProxy]:
    work = tmp_path_factory.mktemp("litellm")
    server = llama.LlamaServer(work / "llama.log").start()
    try:
        p = litellm.LiteLLMProxy(server.base_url, work).start()
        try:
            yield p
        finally:
            p.stop()
    finally:
        server.stop()


def provider(base_url: str, **kw: Any) -> dict[str, Any]:
    return {"kind": "anthropic", "baseUrl": base_url, "model": litellm.MODEL, "apiKeyEnv": KEY_ENV,
            "temperature": 0, "maxTokens": 256, "readTimeoutS": 300, "maxConcurrent": 1,
            # LiteLLM passes content lists through, and llama-cpp-python takes only a string as a
            # system message's content: no cache_control blocks (the cache is the API's anyway)
            "promptCaching": False, **kw}  # fmt: skip


def profiles_file(path: Path, prov: dict[str, Any]) -> Path:
    path.write_bytes(orjson.dumps({"profiles": [{
        "name": "claudish", "systemPrompt": llama.SYSTEM, "tools": ["calculator"],
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


@pytest.mark.parametrize("name", sorted(RUNS))
async def test_tool_using_runs_complete_through_litellm(
    name: str, proxy: litellm.LiteLLMProxy, redis: Redis, redis_url: str, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.setenv(KEY_ENV, litellm.MASTER_KEY)
    async with (
        httpx.AsyncClient(timeout=300) as client,
        messages_replay.Recorder(proxy.base_url, client) as rec,
    ):
        kw, expected = RUNS[name]
        path = profiles_file(tmp_path / "profiles.json", provider(rec.base_url, **kw))
        p = producer_for(redis, redis_url)
        p.profiles = load_profiles(str(path))
        sub = await p.submit({"agent": "claudish", **ASK})
        async with running_worker(redis_url, profiles=str(path)):
            done = (await wait_all(p, [sub.run_id], 600))[sub.run_id]  # type: ignore[union-attr]
        events = await stream(redis, sub.run_id)  # type: ignore[union-attr]
    assert_clean_stream(events)
    calls = [e.payload for e in events if e.kind == EventKind.TOOL_CALL]
    if os.environ.get("AGENTMILL_RECORD") == "1":
        run = {"provider": provider("", **kw), "input": ASK, "status": done.status.value}
        messages_replay.save(name, run, rec.exchanges)
    assert all(x.status == 200 and b"message_start" in x.body for x in rec.exchanges)
    assert done.status.value == expected, (done.result, [x.status for x in rec.exchanges])
    if expected == "completed":
        assert calls and calls[0]["name"] == "calculator"
        assert done.result is not None and done.result.final_assistant_message is not None
    else:
        retried = [e.payload.get("reason") for e in events if e.payload.get("status") == "retrying"]
        assert retried and set(retried) == {"empty"}
