"""Conformance against llama-cpp-python's OpenAI-compatible server serving Gemma 3 270M.

Installed by bin/peers/llama.sh (``bin/dev peer`` runs it, then these tests). Each test starts
the server on a free port. ``AGENTMILL_RECORD=1`` rewrites tests/data/llama_cpp/ from the live
server; tests/unit/test_llama_cpp_replay.py replays those files in CI.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import orjson
import pytest
from redis.asyncio import Redis

from agentmill_client.models import RunInput
from shared.profiles import load_profiles
from tests.integration.helpers import assert_clean_stream, producer_for, running_worker, stream, wait_all
from tests.peer import llama
from tests.support.redis_server import free_port
from tests.support.schema import K
from worker import machine
from worker.core.config import resolve_config
from worker.models.openai import request_body
from worker.tools.registry import ProfileTools

pytestmark = [
    pytest.mark.peer,
    pytest.mark.timeout(600),
    pytest.mark.skipif(
        llama.installed() is None, reason="llama-cpp-python not installed: run bin/peers/llama.sh"
    ),
]
# Gemma 270M under the chatml template mostly echoes the user: a long list makes a long stream.
LONG = "Please repeat this list back to me exactly: " + ", ".join(f"item number {i}" for i in range(1, 120))
PROMPTS = [
    "Name a colour.",
    "Name a fruit.",
    "Name an animal.",
    "Name a country.",
    "Name a planet.",
    "Name a river.",
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[llama.LlamaServer]:
    s = llama.LlamaServer(tmp_path_factory.mktemp("llama") / "server.log").start()
    try:
        yield s
    finally:
        s.stop()


def write_profiles(path: Path, base_url: str, **provider: Any) -> Path:
    path.write_bytes(orjson.dumps({"profiles": [{
        "name": "gemma", "systemPrompt": llama.SYSTEM, "tools": ["calculator"],
        "retry": {"maxRetries": 3, "baseDelayMs": 200, "maxDelayMs": 1000},
        "provider": {"kind": "openai", "baseUrl": base_url, "model": "gemma-3-270m", "temperature": 0,
                     "maxTokens": 48, "readTimeoutS": 300, **provider}}]}))  # fmt: skip
    return path


def first_request(profiles_path: Path, prompt: str) -> dict[str, Any]:
    """The body a run's first model call sends, built as the worker builds it (config, machine)."""
    profile = load_profiles(str(profiles_path))["gemma"]
    run = RunInput.model_validate({"agent": "gemma", **ask(prompt)})
    cfg = resolve_config(profile, run, ProfileTools(profile).specs, has_session=False)
    s, _ = machine.decide(machine.initial_state("peer"), machine.Started(0, cfg, list(run.input_messages)))
    _, cmds = machine.decide(s, machine.ContextLoaded(0, []))
    req = next(c.request for c in cmds if isinstance(c, machine.CallModel))
    return request_body(profile.provider, req)


async def direct_answer(base_url: str, prompt: str, tmp_path: Path) -> str:
    """The server's own answer (not streamed, nothing else running) to the body a run sends."""
    payload = first_request(write_profiles(tmp_path / "direct.json", base_url), prompt)
    payload.pop("stream_options")
    payload["stream"] = False
    async with httpx.AsyncClient(timeout=300) as client:
        r = await client.post(f"{base_url}/chat/completions", json=payload)
    r.raise_for_status()
    return str(r.json()["choices"][0]["message"]["content"])


@pytest.fixture
async def pool(redis: Redis, redis_url: str, tmp_path: Path, server: llama.LlamaServer) -> AsyncIterator[Any]:
    """Submit runs of profile ``gemma`` (provider fields given per call) to one in-process worker."""
    ctx: dict[str, Any] = {}

    async def run(bodies: list[dict[str, Any]], within: float = 300, **provider: Any) -> list[Any]:
        path = write_profiles(
            tmp_path / "profiles.json", provider.pop("base_url", server.base_url), **provider
        )
        p = producer_for(redis, redis_url)
        p.profiles = load_profiles(str(path))
        async with running_worker(redis_url, profiles=str(path)):
            subs = await p.submit_many([{"agent": "gemma", **b} for b in bodies])
            ids = [s.run_id for s in subs]  # type: ignore[union-attr]
            recs = await wait_all(p, ids, within)
        ctx["ids"] = ids
        return [recs[i] for i in ids]

    yield run


def ask(prompt: str) -> dict[str, Any]:
    return {"inputMessages": [{"role": "user", "content": prompt}]}


async def test_recordings_still_describe_the_server(server: llama.LlamaServer) -> None:
    """The quirks the unit suite replays are still what this server does (AGENTMILL_RECORD=1 saves)."""
    live = await llama.recordings(server.base_url)
    if os.environ.get("AGENTMILL_RECORD") == "1":
        llama.save(live)
    stored = llama.load()
    assert set(live) == set(stored)
    for name, t in live.items():
        assert (t.status, t.request) == (stored[name].status, stored[name].request), name
    assert b'"finish_reason": "stop"' in live["chat_stream"].body
    assert b'"finish_reason": "tool_calls"' in live["tool_call_stream"].body
    assert b"Input should be a valid string" in live["null_content_500"].body
    assert live["auto_tool_broken_stream"].body == b""
    interrupted = live["interrupted_stream"].body
    assert interrupted.rstrip().endswith(b"data: [DONE]") and b'"finish_reason": "stop"' not in interrupted
    assert b'"finish_reason": "stop"' in live["structured_stream"].body
    assert live["json_schema_refused"].status >= 400  # it takes only {"type": "text" | "json_object"}
    assert live["image_parts_stream"].status == 200
    assert b'"content": "' in live["image_parts_stream"].body
    # the photo's base64 overflows the context after the stream's 200: an empty body, no error
    assert (live["image_parts_overflow"].status, live["image_parts_overflow"].body) == (200, b"")
    assert b'"content": "' in live["image_placeholder_stream"].body


async def prompt_tokens(base_url: str, cfg_extra: dict[str, Any], url: str) -> int:
    """The prompt tokens the server counts (not streamed: streams carry no usage) for a text-and-image
    message as our provider sends it."""
    payload = llama.body(llama.provider(base_url, maxTokens=1, **cfg_extra), llama.with_image(url))
    payload.pop("stream_options")
    payload["stream"] = False
    async with httpx.AsyncClient(timeout=300) as client:
        r = await client.post(f"{base_url}/chat/completions", json=payload)
    r.raise_for_status()
    return int(r.json()["usage"]["prompt_tokens"])


async def test_image_parts_reach_a_text_only_models_prompt_as_text(server: llama.LlamaServer) -> None:
    """What the server does with parts: the chatml template renders the list into the prompt, so the
    image's base64 costs prompt tokens (and a photo overflows the context); as a placeholder it
    costs a few."""
    parts = await prompt_tokens(server.base_url, {}, llama.TINY)
    placeholder = await prompt_tokens(server.base_url, {"imageParts": "placeholder"}, llama.TINY)
    eight = llama.data_url(llama.png(8))
    bigger = await prompt_tokens(server.base_url, {}, eight)
    photo = await prompt_tokens(server.base_url, {"imageParts": "placeholder"}, llama.PHOTO)
    print(f"prompt tokens: 1x1 PNG as parts {parts}, as placeholder {placeholder}; 8x8 PNG as parts "
          f"{bigger}; 40x40 PNG as placeholder {photo}")  # fmt: skip
    # base64 is at least one token per four characters: the data URL is in the prompt as text
    assert parts > placeholder + len(llama.TINY) // 4 and photo == placeholder
    assert bigger - parts >= (len(eight) - len(llama.TINY)) // 4


async def test_a_text_and_image_run_completes(pool: Any, redis: Redis) -> None:
    """A user message of a text part and an image part is accepted on the wire and the run
    completes (Gemma 270M is text-only: the answer ignores the image)."""
    [rec] = await pool([{"inputMessages": [llama.image_message(llama.TINY)]}], maxConcurrent=1)
    assert rec.status.value == "completed", rec.result.last_error
    assert rec.result.final_assistant_message.content
    # Gemma 270M echoes its prompt: the chatml template put the parts' repr there, data URL and all
    print(f"text and a 1x1 image: {rec.result.final_assistant_message.content!r}")


async def test_a_photo_sized_image_as_parts_overflows_and_the_run_fails(pool: Any) -> None:
    """As parts, a 4.8 kB PNG's base64 overflows Gemma's 2048-token context; streaming, the server
    then sends 200 and an empty body, which agentmill retries as a truncation until its retries run
    out (use ``imageParts: "placeholder"``)."""
    [failed] = await pool(
        [{"inputMessages": [llama.image_message(llama.PHOTO)]}], within=120, maxConcurrent=1
    )
    err = failed.result.last_error
    print(f"photo as parts: {failed.status.value} {err.code if err else None}: {err.message if err else ''}")
    assert failed.status.value == "failed" and err.code == "model_retries_exhausted"
    assert "truncated" in err.message


async def test_a_photo_sized_image_with_image_parts_placeholder_completes(pool: Any) -> None:
    """``imageParts: "placeholder"``: the same message goes out as text with ``[image]``; the run completes."""
    body = {"inputMessages": [llama.image_message(llama.PHOTO)]}
    [done] = await pool([body], maxConcurrent=1, imageParts="placeholder")
    assert done.status.value == "completed", done.result.last_error
    assert done.result.final_assistant_message.content
    print(f"photo as a placeholder: {done.result.final_assistant_message.content!r}")


async def test_a_json_schema_run_returns_an_output_that_validates(pool: Any, redis: Redis) -> None:
    """The schema goes out as llama-cpp-python's json_object schema (the server builds a grammar from
    it); agentmill validates the answer and returns it parsed in result.output."""
    rf = {"type": "json_schema", "jsonSchema": {"name": "pick", "schema": llama.PICK}}
    body = {**ask(llama.STRUCTURED_PROMPT), "responseFormat": rf}
    [rec] = await pool([body], maxConcurrent=1, maxTokens=96, responseFormatStyle="json_object_schema")
    events = await stream(redis, rec.run_id)
    repairs = [e.payload for e in events if e.payload.get("code") == "invalid_output"]
    print(f"structured answer: {rec.result.output!r}; {len(repairs)} repairs")
    assert rec.status.value == "completed", (rec.result.last_error, repairs)
    jsonschema.validate(rec.result.output, llama.PICK)


async def test_a_json_schema_run_completes_with_no_style_set(pool: Any, redis: Redis) -> None:
    """Without responseFormatStyle: the server refuses OpenAI's json_schema shape, the worker sends
    the call again as json_object with the schema, and the run completes with a valid output."""
    rf = {"type": "json_schema", "jsonSchema": {"name": "pick", "schema": llama.PICK}}
    body = {**ask(llama.STRUCTURED_PROMPT), "responseFormat": rf}
    [rec] = await pool([body], maxConcurrent=1, maxTokens=96)
    assert rec.status.value == "completed", rec.result.last_error
    jsonschema.validate(rec.result.output, llama.PICK)
    events = await stream(redis, rec.run_id)
    assert not [e for e in events if e.kind == "error"]  # the refusal never reached the run


async def test_a_chat_run_completes_with_the_whole_answer(
    pool: Any, server: llama.LlamaServer, redis: Redis, tmp_path: Path
) -> None:
    expected = await direct_answer(server.base_url, "Name a colour.", tmp_path)
    [rec] = await pool([ask("Name a colour.")], maxConcurrent=1)
    assert rec.status.value == "completed", rec.result
    assert rec.result.final_assistant_message.content == expected and expected
    assert rec.result.finish_reason in ("stop", "length")


async def test_a_forced_tool_run_calls_the_calculator_and_the_follow_up_is_accepted(
    pool: Any, redis: Redis
) -> None:
    """tool_choice forces the calculator on every call that offers tools, so the run only ends at
    maxIterations=2 (with a last call for an answer, without tools, which Gemma 270M tends to
    answer with nothing). What matters: the second request, carrying the tool result, is accepted."""
    body = {**ask("What is 6*7?"), "loopLimits": {"maxIterations": 2}}
    [rec] = await pool([body], toolChoice=llama.FORCED)
    events = await stream(redis, rec.run_id)
    assert_clean_stream(events)
    limit = next(i for i, e in enumerate(events) if e.payload.get("status") == "limit_reached")
    before = events[:limit]
    replies = [e.payload["message"] for e in before if e.kind == "assistant_message"]
    results = [e.payload for e in before if e.kind == "tool_result"]
    assert [[c["name"] for c in r["toolCalls"]] for r in replies] == [["calculator"], ["calculator"]]
    assert len(results) == 2 and all(r["name"] == "calculator" for r in results)
    assert not any(e.payload.get("status") == "retrying" for e in before), [e.payload for e in before]


async def test_six_parallel_runs_with_max_concurrent_one_match_the_servers_own_answers(
    pool: Any, server: llama.LlamaServer, redis: Redis, tmp_path: Path
) -> None:
    expected = [await direct_answer(server.base_url, p, tmp_path) for p in PROMPTS]
    assert all(expected)  # prompts chosen so that Gemma answers something (an empty answer is retried)
    t0 = time.monotonic()
    recs = await pool([ask(p) for p in PROMPTS], maxConcurrent=1)
    took = time.monotonic() - t0
    answers = [
        r.result.final_assistant_message.content if r.result.final_assistant_message else None for r in recs
    ]
    print(f"six runs, maxConcurrent 1: {took:.1f} s")
    assert [r.status.value for r in recs] == ["completed"] * 6, [r.result.last_error for r in recs]
    assert answers == expected
    waited = 0
    for r in recs:
        events = await stream(redis, r.run_id)
        assert not any(e.payload.get("reason") == "truncated" for e in events)  # never interrupted
        waited += sum(1 for e in events if e.payload.get("status") == "waiting_for_capacity")
    assert waited >= 1


async def test_without_a_limit_the_server_interrupts_and_no_cut_answer_completes(
    pool: Any, server: llama.LlamaServer, redis: Redis, tmp_path: Path
) -> None:
    """The issue's failure: parallel runs interrupt each other. Cut-off answers must never complete."""
    expected = [await direct_answer(server.base_url, p, tmp_path) for p in PROMPTS]
    recs = await pool([ask(p) for p in PROMPTS])
    truncations = 0
    for r, want in zip(recs, expected, strict=True):
        events = await stream(redis, r.run_id)
        truncations += sum(1 for e in events if e.payload.get("reason") == "truncated")
        if r.status.value == "completed":
            assert r.result.final_assistant_message.content == want
    print(f"six runs, no limit: {truncations} truncated attempts, "
          f"{sum(r.status.value == 'completed' for r in recs)} completed")  # fmt: skip


async def test_abort_mid_stream_stops_within_a_second(
    redis: Redis, redis_url: str, tmp_path: Path, server: llama.LlamaServer
) -> None:
    path = write_profiles(tmp_path / "profiles.json", server.base_url, maxTokens=1500)
    p = producer_for(redis, redis_url)
    p.profiles = load_profiles(str(path))
    async with running_worker(redis_url, profiles=str(path)):
        sub = await p.submit({"agent": "gemma", **ask(LONG)})
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if await redis.exists(K.events(sub.run_id)) and any(
                e.kind == "model_delta" for e in await stream(redis, sub.run_id)
            ):
                break
            await asyncio.sleep(0.05)
        t0 = time.monotonic()
        assert await p.abort(sub.run_id) == "requested"
        rec = (await wait_all(p, [sub.run_id], 10))[sub.run_id]
        stopped = time.monotonic() - t0
        # The server is free again: it answers the next request at once.
        t1 = time.monotonic()
        await direct_answer(server.base_url, "Name a colour.", tmp_path)
        next_answer = time.monotonic() - t1
    print(f"abort mid-stream: {stopped * 1000:.0f} ms; the next request answered in {next_answer:.1f} s")
    assert rec.status.value == "aborted" and stopped < 1.0
    assert not any(e.kind == "assistant_message" for e in await stream(redis, sub.run_id))


async def test_a_server_that_is_not_listening_fails_the_run_with_a_clear_error(pool: Any) -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    [rec] = await pool([ask("Name a colour.")], within=60, base_url=url)
    err = rec.result.last_error
    assert rec.status.value == "failed" and err.code == "model_retries_exhausted"
    assert f"cannot connect to {url}/chat/completions" in err.message and "ConnectError" in err.message
