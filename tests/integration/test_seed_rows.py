"""The seeds' last rows through a real worker and Redis: the transcript on request,
the default cap on tool calls, the model widening and searching its own context."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from redis.asyncio import Redis

from agentmill_client import limits
from producer.service import SubmissionError
from tests.integration.helpers import (
    assert_clean_stream,
    metric_samples,
    producer_for,
    run_with,
    running_worker,
    script_run,
    stream,
    wait_all,
)
from tests.support.fake_openai import FakeOpenAI, Reply
from worker.process.jobs import WorkerProcess

pytestmark = pytest.mark.integration


async def test_include_messages_puts_the_final_transcript_in_the_result(
    redis: Redis, redis_url: str, worker: WorkerProcess
) -> None:
    p = producer_for(redis, redis_url)
    echo = {"toolCalls": [{"name": "echo", "arguments": {"text": "found it"}}]}
    asked = await p.submit(script_run([echo, {"text": "done"}], includeMessages=True))
    plain = await p.submit(script_run([echo, {"text": "done"}]))
    recs = await wait_all(p, [asked.run_id, plain.run_id], 15)
    res = recs[asked.run_id].result
    assert res is not None and res.messages is not None and res.messages_omitted == 0
    assert [(m.role, m.content) for m in res.messages] == [
        ("user", "go"), ("assistant", ""), ("tool", "found it"), ("assistant", "done")
    ]  # fmt: skip
    assert all(m.created_at for m in res.messages if m.role != "tool")
    assert recs[plain.run_id].result is not None and recs[plain.run_id].result.messages is None  # type: ignore[union-attr]
    assert_clean_stream(await stream(redis, asked.run_id))


async def test_a_run_at_its_tool_call_cap_ends_with_an_answer_and_stop_reason(
    redis: Redis, redis_url: str, worker: WorkerProcess
) -> None:
    p = producer_for(redis, redis_url)
    echo = {
        "toolCalls": [
            {"name": "echo", "arguments": {"text": "a"}},
            {"name": "echo", "arguments": {"text": "b"}},
        ]
    }
    sub = await p.submit(script_run([echo, echo, {"text": "my answer"}], loopLimits={"maxToolCalls": 3}))
    rec = (await wait_all(p, [sub.run_id], 15))[sub.run_id]
    assert rec.status.value == "completed" and rec.result is not None
    assert rec.result.stop_reason == "max_tool_calls"
    assert (
        rec.result.final_assistant_message is not None
        and rec.result.final_assistant_message.content == "my answer"
    )
    events = await stream(redis, sub.run_id)
    assert_clean_stream(events)
    results = [e.payload for e in events if e.kind == "tool_result"]
    assert [r["isError"] for r in results] == [False, False, True, True]  # the second round is refused
    assert events[-1].payload["stopReason"] == "max_tool_calls"


async def test_the_model_widens_its_window_searches_its_history_and_recalls_what_it_found(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    wide = {"name": "wide", "provider": {"kind": "scripted", "mode": "script"}, "tools": ["echo"],
            "context": {"maxRunLoops": 1, "historyTools": True, "expandContextWindowSize": 2}}  # fmt: skip
    path = tmp_path / "profiles.json"
    path.write_bytes(orjson.dumps({"profiles": [wide]}))
    p = producer_for(redis, redis_url, profiles=str(path))
    secret = "the zebra code is 4471 " + "z" * 900  # longer than a past turn keeps
    echo = {"toolCalls": [{"name": "echo", "arguments": {"text": secret}}]}

    def turn(text: str, script: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
        return {**script_run(script, sessionId="s-w", agent="wide", **extra),
                "inputMessages": [{"role": "user", "content": text}]}  # fmt: skip

    async with running_worker(redis_url, profiles=str(path)):
        r1 = await p.submit(turn("first question", [echo, {"text": "first answer"}], autoCreateSession=True))
        await wait_all(p, [r1.run_id], 15)
        r2 = await p.submit(turn("second question", [{"text": "second answer"}]))
        await wait_all(p, [r2.run_id], 15)
        load = {"echoContext": True, "toolCalls": [{"name": "load_older_history", "arguments": {}}]}
        find = {
            "echoContext": True,
            "toolCalls": [{"name": "search_history", "arguments": {"query": "zebra"}}],
        }
        recall = {
            "toolCalls": [
                {"name": "recall_tool_call", "arguments": {"callIds": [f"{r1.run_id}/c1.0", "nope"]}}
            ]
        }
        r3 = await p.submit(turn("third question", [load, find, recall, {"text": "done"}]))
        rec = (await wait_all(p, [r3.run_id], 15))[r3.run_id]
    assert rec.status.value == "completed"
    events = await stream(redis, r3.run_id)
    assert_clean_stream(events)
    seen = [orjson.loads(e.payload["message"]["content"].split("\n")[0]) for e in events
            if e.kind == "assistant_message" and e.payload["message"]["content"].startswith("{")]  # fmt: skip
    before, after = ([m["content"] for m in s["messages"][1:]] for s in seen[:2])
    assert before[:2] == ["second question", "second answer"] and "first question" not in before
    assert after[0] == "first question" and "second question" in after  # the older turn is in the input now
    assert {"load_older_history", "search_history", "recall_tool_call"} <= set(seen[0]["tools"])
    widened = next(e.payload for e in events if e.payload.get("status") == "context_window_expanded")
    assert (widened["contextWindowSize"], widened["added"], widened["olderLeft"]) == (4, 2, 0)
    results = {e.payload["name"]: e.payload for e in events if e.kind == "tool_result"}
    assert orjson.loads(results["load_older_history"]["content"])["contextWindowSize"] == 4
    hits = orjson.loads(results["search_history"]["content"])["hits"]
    assert (
        hits[0]["callId"] == f"{r1.run_id}/c1.0"
        and hits[0]["tool"] == "echo"
        and "zebra" in hits[0]["snippet"]
    )
    recalled = orjson.loads(results["recall_tool_call"]["content"])["results"]
    assert recalled == [{"callId": f"{r1.run_id}/c1.0", "content": secret, "isError": False},
                        {"callId": "nope", "error": "tool call result not found"}]  # fmt: skip


async def test_a_cached_tool_is_executed_once_per_tenant_and_arguments_and_counted(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    cachy = {"name": "cachy", "provider": {"kind": "scripted", "mode": "script"}, "tools": ["echo", "fail"],
             "toolSettings": {"echo": {"cache": {"ttlS": 60}}, "fail": {"cache": {"ttlS": 60}, "maxTries": 1}}}  # fmt: skip
    path = tmp_path / "profiles.json"
    path.write_bytes(orjson.dumps({"profiles": [cachy]}))
    p = producer_for(redis, redis_url, profiles=str(path))

    def calls(*args: dict[str, Any]) -> dict[str, Any]:
        return {"toolCalls": [{"name": "echo" if "text" in a else "fail", "arguments": a} for a in args]}

    first = [calls({"text": "x"}, {"message": "down"}), {"text": "done"}]
    again = [calls({"text": "x"}, {"message": "down"}, {"text": "y"}), {"text": "done"}]
    async with running_worker(redis_url, profiles=str(path)) as wp:
        r1 = await p.submit({**script_run(first), "agent": "cachy"})
        await wait_all(p, [r1.run_id], 15)
        r2 = await p.submit({**script_run(again), "agent": "cachy"})
        r3 = await p.submit({**script_run(again), "agent": "cachy"}, tenant="other")
        rec2 = (await wait_all(p, [r2.run_id], 15))[r2.run_id]
        rec3 = await p.wait(r3.run_id, timeout_s=15, tenant="other")
        samples = metric_samples(wp.metrics.render().decode())
    assert rec2.status.value == "completed" and rec3 is not None and rec3.status.value == "completed"

    def results(run_id: str, events: list[Any]) -> list[tuple[str, bool]]:
        return [
            (e.payload["content"], e.payload.get("cached", False)) for e in events if e.kind == "tool_result"
        ]

    r1_results = results(r1.run_id, await stream(redis, r1.run_id))
    assert r1_results[0] == ("x", False) and r1_results[1][1] is False
    r2_events = await stream(redis, r2.run_id)
    assert_clean_stream(r2_events)
    got = results(r2.run_id, r2_events)
    assert got[0] == ("x", True)  # the same arguments: served from the cache
    assert got[1][1] is False and "down" in got[1][0]  # an error result is never cached
    assert got[2] == ("y", False)  # other arguments: executed
    assert results(r3.run_id, await stream(redis, rec3.key))[0] == ("x", False)  # another tenant: executed
    assert samples[("agentmill_tool_calls_total", (("outcome", "cached"), ("tool", "echo")))] == 1
    cached = [k async for k in redis.scan_iter(match="am:*:tc:*")]
    assert len(cached) == 4 and all([0 < await redis.ttl(k) <= 60 for k in cached])  # x and y, per tenant


PIXEL = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="


async def test_a_text_and_image_message_reaches_an_openai_compatible_provider_as_parts(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    fake = FakeOpenAI([Reply(text="a red pixel")])
    path = tmp_path / "profiles.json"
    path.write_bytes(orjson.dumps({"profiles": [{"name": "gpt", "provider": {"kind": "openai", "baseUrl": fake.base_url,
                                                                              "model": "fake-1"}}]}))  # fmt: skip
    parts = [{"type": "text", "text": "what is in this picture?"},
             {"type": "image_url", "image_url": {"url": PIXEL, "detail": "low"}},
             {"type": "image_url", "image_url": {"url": "https://images.example/cat.jpg"}}]  # fmt: skip
    async with fake:
        rec, _ = await run_with(
            redis, redis_url, path, {"inputMessages": [{"role": "user", "content": parts}]}
        )
    assert rec.status.value == "completed"  # type: ignore[attr-defined]
    assert fake.requests[0]["messages"][1] == {"role": "user", "content": parts}  # as given, OpenAI's shape


async def test_images_past_their_bounds_are_refused_with_413(redis: Redis, redis_url: str) -> None:
    p = producer_for(redis, redis_url)

    def run(*urls: str) -> dict[str, Any]:
        content = [
            {"type": "text", "text": "look"},
            *({"type": "image_url", "image_url": {"url": u}} for u in urls),
        ]
        return {"inputMessages": [{"role": "user", "content": content}]}

    big = "data:image/png;base64," + "A" * limits.MAX_IMAGE_DATA_BYTES
    half = "data:image/png;base64," + "A" * (limits.MAX_RUN_IMAGE_BYTES // 2)
    for body, what in ((run(big), "data: URL"), (run(half, half), "the run's images"),
                       (run(*[PIXEL] * (limits.MAX_IMAGE_PARTS + 1)), "images; at most")):  # fmt: skip
        with pytest.raises(SubmissionError) as exc:
            await p.submit(body)
        assert (exc.value.status, exc.value.code) == (413, "too_large") and what in exc.value.message
    with pytest.raises(SubmissionError) as bad:
        await p.submit(run("http://images.example/cat.jpg"))
    assert bad.value.status == 422
