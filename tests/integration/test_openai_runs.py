"""Full agent runs against a local OpenAI-compatible server, through a real worker and Redis."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import orjson
import pytest
from redis.asyncio import Redis

from shared.profiles import load_profiles
from shared.settings import Settings
from tests.integration.helpers import producer_for, run_with, stream, wait_all
from tests.support.fake_openai import FakeOpenAI, Reply
from tests.support.schema import K
from worker.core.preamble import unframe
from worker.process.jobs import WorkerProcess

pytestmark = pytest.mark.integration
KEY = "sk-live-DO-NOT-LEAK-42"


@pytest.fixture
async def setup(
    redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[FakeOpenAI, Path]]:
    monkeypatch.setenv("FAKE_OPENAI_KEY", KEY)
    fake = FakeOpenAI([])
    path = tmp_path / "profiles.json"
    path.write_bytes(orjson.dumps({"profiles": [{
        "name": "gpt", "provider": {"kind": "openai", "baseUrl": fake.base_url, "model": "fake-1", "apiKeyEnv": "FAKE_OPENAI_KEY",
                                    "temperature": 0.1},
        "tools": ["calculator", "echo"]}]}))  # fmt: skip
    async with fake:
        yield fake, path


USER = {"inputMessages": [{"role": "user", "content": "compute please"}]}


async def test_a_run_with_two_tool_rounds_completes(
    redis: Redis, redis_url: str, setup: tuple[FakeOpenAI, Path]
) -> None:
    fake, path = setup
    fake.replies += [
        Reply(
            text="Let me compute.",
            tool_calls=[("calculator", {"expression": "6*7"}), ("echo", {"text": "hi"})],
        ),
        Reply(tool_calls=[("calculator", {"expression": "42+1"})]),
        Reply(text="The answer is 43."),
    ]
    rec, events = await run_with(redis, redis_url, path, USER)
    assert rec.status.value == "completed"  # type: ignore[attr-defined]
    assert rec.result.final_assistant_message.content == "The answer is 43."  # type: ignore[attr-defined]
    assert [e.payload["content"] for e in events if e.kind == "tool_result"] == ["42", "hi", "43"]
    assert any(e.kind == "model_delta" for e in events)
    third = fake.requests[2]
    assert [m["role"] for m in third["messages"]] == [
        "system",
        "user",
        "assistant",
        "tool",
        "tool",
        "assistant",
        "tool",
    ]
    assert (
        third["stream"] is True
        and third["temperature"] == 0.1
        and {t["function"]["name"] for t in third["tools"]} == {"calculator", "echo", "recall_tool_call"}
    )
    assert all(h["authorization"] == f"Bearer {KEY}" for h in fake.headers)
    assert rec.result.usage.input_tokens == 33  # type: ignore[attr-defined]  # 3 calls × 11 from the usage chunks
    assert KEY not in str([e.payload for e in events])


async def test_a_server_that_says_call_0_in_every_reply_gets_each_call_run_and_answered_once(
    redis: Redis, redis_url: str, setup: tuple[FakeOpenAI, Path]
) -> None:
    """Finding 8: ids are the server's to invent (this one counts from call_0 in every reply and
    repeats one inside a reply); agentmill runs each call once and answers each call once."""
    fake, path = setup
    fake.replies += [
        Reply(tool_calls=[("echo", {"text": "one"})], ids=["call_0"]),
        Reply(tool_calls=[("echo", {"text": "two"}), ("echo", {"text": "three"})], ids=["call_0", "call_0"]),
        Reply(text="done"),
    ]
    rec, events = await run_with(redis, redis_url, path, USER)
    assert rec.status.value == "completed"  # type: ignore[attr-defined]
    results = [(e.payload["toolCallId"], e.payload["content"]) for e in events if e.kind == "tool_result"]
    assert results == [("c1.0", "one"), ("c2.0", "two"), ("c2.1", "three")]
    records = {
        k.decode(): orjson.loads(v) for k, v in (await redis.hgetall(K.tools(events[0].run_id))).items()
    }
    assert {k: (r["state"], r["attempts"]) for k, r in records.items()} == {
        "c1.0": ("done", 1), "c2.0": ("done", 1), "c2.1": ("done", 1)}  # fmt: skip
    last = fake.requests[2]["messages"]
    sent = [c["id"] for m in last if m["role"] == "assistant" for c in m.get("tool_calls", [])]
    answered = [(m["tool_call_id"], unframe(m["content"])) for m in last if m["role"] == "tool"]
    assert sent[0] == "call_0" and len(set(sent)) == 3  # the server's ids, unique in the conversation
    assert answered == list(zip(sent, ["one", "two", "three"], strict=True))  # each call answered once


async def test_429_with_retry_after_is_retried_after_about_a_second(
    redis: Redis, redis_url: str, setup: tuple[FakeOpenAI, Path]
) -> None:
    fake, path = setup
    fake.replies += [
        Reply(status=429, headers={"Retry-After": "1"}, error="rate limited"),
        Reply(text="fine"),
    ]
    t0 = time.monotonic()
    rec, events = await run_with(redis, redis_url, path, USER)
    assert rec.status.value == "completed" and time.monotonic() - t0 >= 1.0  # type: ignore[attr-defined]
    retry = next(e.payload for e in events if e.payload.get("status") == "retrying")
    assert retry["reason"] == "http_429" and 1000 <= retry["delayMs"] <= 1300


async def test_401_fails_the_run_at_once_without_leaking_the_key(
    redis: Redis, redis_url: str, setup: tuple[FakeOpenAI, Path]
) -> None:
    fake, path = setup
    fake.replies += [Reply(status=401, error="Incorrect API key provided")]
    rec, _ = await run_with(redis, redis_url, path, USER)
    err = rec.result.last_error  # type: ignore[attr-defined]
    assert (
        rec.status.value == "failed" and err.code == "model_http_401" and "Incorrect API key" in err.message
    )  # type: ignore[attr-defined]
    assert len(fake.requests) == 1 and KEY not in err.message


async def test_abort_mid_stream_closes_the_http_stream(
    redis: Redis, redis_url: str, setup: tuple[FakeOpenAI, Path]
) -> None:
    fake, path = setup
    fake.replies += [Reply(text="slow " * 200, pieces=200, chunk_delay_s=0.1)]
    p = producer_for(redis, redis_url)
    p.profiles = load_profiles(str(path))
    sub = await p.submit({"agent": "gpt", **USER})
    wp = WorkerProcess(Settings(redis_url=redis_url, poll_delay_s=0.02, profiles=str(path)))
    task = asyncio.create_task(wp.run())
    try:
        while not any(
            e.kind == "model_delta"
            for e in (await stream(redis, sub.run_id) if await redis.exists(K.events(sub.run_id)) else [])
        ):
            await asyncio.sleep(0.05)
        t0 = time.monotonic()
        assert await p.abort(sub.run_id) == "requested"
        rec = (await wait_all(p, [sub.run_id], 5))[sub.run_id]
        stopped = time.monotonic() - t0
        await asyncio.wait_for(fake.disconnected.wait(), 2)
    finally:
        wp.request_stop()
        await task
    assert rec.status.value == "aborted" and stopped < 1.5


async def test_a_tool_round_trip_sends_string_content_a_strict_server_accepts(
    redis: Redis, redis_url: str, setup: tuple[FakeOpenAI, Path]
) -> None:
    """llama-cpp-python once refused the follow-up request's ``"content": null`` with a 500."""
    fake, path = setup
    fake.strict = True
    fake.replies += [Reply(tool_calls=[("calculator", {"expression": "2+3"})]), Reply(text="It is 5.")]
    rec, _ = await run_with(redis, redis_url, path, USER)
    assert rec.status.value == "completed" and len(fake.requests) == 2  # type: ignore[attr-defined]
    assistant = fake.requests[1]["messages"][2]
    assert assistant["role"] == "assistant" and assistant["content"] == "" and assistant["tool_calls"]


async def test_a_cut_off_stream_is_retried_and_never_completes_the_run(
    redis: Redis, redis_url: str, setup: tuple[FakeOpenAI, Path]
) -> None:
    """A stream that stops without a finish_reason (a server interrupting it) is withdrawn and retried."""
    fake, path = setup
    fake.replies += [
        Reply(text="Name a colour. (2", finish=None, pieces=2, chunk_delay_s=0.15),
        Reply(text="Name a colour. (2)", reasoning="short answer"),
    ]
    rec, events = await run_with(redis, redis_url, path, USER)
    assert rec.status.value == "completed"  # type: ignore[attr-defined]
    assert rec.result.final_assistant_message.content == "Name a colour. (2)"  # type: ignore[attr-defined]
    assert rec.result.finish_reason == "stop"  # type: ignore[attr-defined]
    st = [e.payload for e in events if e.kind == "status"]
    assert any(p["status"] == "retrying" and p["reason"] == "truncated" for p in st)
    deltas = [e.payload for e in events if e.kind == "model_delta"]
    # What readers saw of the cut-off attempt (chunks 150 ms apart: published) was withdrawn.
    assert any(d["attempt"] == 0 for d in deltas)
    assert any(p["status"] == "model_call_discarded" and p["attempt"] == 0 for p in st)
    assert any(d.get("reasoning") == "short answer" and d["attempt"] == 1 for d in deltas)
    assert "".join(d.get("text", "") for d in deltas if d["attempt"] == 1) == "Name a colour. (2)"
    assert [e.payload["message"]["content"] for e in events if e.kind == "assistant_message"] == [
        "Name a colour. (2)"
    ]


async def test_length_and_content_filter_end_the_run_as_documented(
    redis: Redis, redis_url: str, setup: tuple[FakeOpenAI, Path]
) -> None:
    fake, path = setup
    fake.replies += [Reply(text="The first primes are 2, 3 and", finish="length")]
    rec, events = await run_with(redis, redis_url, path, USER)
    assert (rec.status.value, rec.result.finish_reason) == ("completed", "length")  # type: ignore[attr-defined]
    assert events[-1].payload.get("finishReason") == "length"
    fake.replies += [Reply(text="I can", finish="content_filter")]
    rec, _ = await run_with(redis, redis_url, path, USER)
    assert rec.status.value == "failed" and rec.result.last_error.code == "model_content_filter"  # type: ignore[attr-defined]
    assert len(fake.requests) == 2  # not retried
