"""The state machine's policies through a real worker and Redis, with faults from the scripted model."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from redis.asyncio import Redis

from agentmill_client.models import RunEvent
from producer.service import Producer
from tests.integration.helpers import (
    assert_clean_stream,
    producer_for,
    running_worker,
    script_run,
    stream,
    wait_all,
)
from worker.process.jobs import WorkerProcess

pytestmark = pytest.mark.integration


async def run_one(
    p: Producer, redis: Redis, body: dict, within: float = 30
) -> tuple[str, list[RunEvent], object]:
    sub = await p.submit(body)
    rec = (await wait_all(p, [sub.run_id], within))[sub.run_id]
    events = await stream(redis, sub.run_id)
    assert_clean_stream(events)
    return rec.status.value, events, rec.result


def statuses(events: list[RunEvent]) -> list[str]:
    return [e.payload["status"] for e in events if e.kind == "status"]


async def test_two_503s_then_success_completes_with_two_retrying_events(
    redis: Redis, redis_url: str, worker: WorkerProcess
) -> None:
    p = producer_for(redis, redis_url)
    script = [{"error": {"status": 503, "message": "busy"}}, {"error": {"status": 503}}, {"text": "finally"}]
    status, events, result = await run_one(p, redis, script_run(script))
    assert status == "completed"
    retries = [e.payload for e in events if e.kind == "status" and e.payload["status"] == "retrying"]
    assert [r["attempt"] for r in retries] == [1, 2]
    assert all(r["reason"] == "http_503" for r in retries)
    assert (
        800 <= retries[0]["delayMs"] <= 1200 and 1600 <= retries[1]["delayMs"] <= 2400
    )  # 1 s doubling, ±20 %
    assert result.final_assistant_message.content == "finally"  # type: ignore[attr-defined]


async def test_401_fails_at_once(redis: Redis, redis_url: str, worker: WorkerProcess) -> None:
    p = producer_for(redis, redis_url)
    status, events, result = await run_one(
        p, redis, script_run([{"error": {"status": 401, "message": "bad key"}}])
    )
    assert status == "failed"
    assert statuses(events) == ["running", "failed"]
    assert result.last_error.code == "model_http_401" and "bad key" in result.last_error.message  # type: ignore[attr-defined]


async def test_exhausted_retries_name_the_cause(redis: Redis, redis_url: str, tmp_path: Path) -> None:
    # The default three retries, their backoff 50 ms doubling (a profile's retry settings) rather than
    # the default 1 s (1 + 2 + 4 s of waiting; test_two_503s_then_success checks those delays).
    path = tmp_path / "profiles.json"
    quick = {"name": "quick", "provider": {"kind": "scripted", "mode": "script"},
             "retry": {"baseDelayMs": 50, "maxDelayMs": 400}}  # fmt: skip
    path.write_bytes(orjson.dumps({"profiles": [quick]}))
    p = producer_for(redis, redis_url, profiles=str(path))
    body = {**script_run([{"error": {"status": 429, "retryAfterMs": 10}}] * 4), "agent": "quick"}
    async with running_worker(redis_url, profiles=str(path)):
        status, events, result = await run_one(p, redis, body, within=40)
    assert status == "failed"
    assert result.last_error.code == "model_retries_exhausted" and "http_429" in result.last_error.message  # type: ignore[attr-defined]
    assert statuses(events).count("retrying") == 3
    assert [
        e.payload["delayMs"] for e in events if e.kind == "status" and e.payload["status"] == "retrying"
    ] == [pytest.approx(d, rel=0.25) for d in (50, 100, 200)]


async def test_a_tool_that_always_fails_is_seen_by_the_model_and_the_run_completes(
    redis: Redis, redis_url: str, worker: WorkerProcess
) -> None:
    p = producer_for(redis, redis_url)
    script = [
        {"toolCalls": [{"name": "fail", "arguments": {"message": "disk on fire"}}]},
        {
            "toolCalls": [
                {"name": "no_such_tool", "arguments": {}},
                {"name": "echo", "rawArguments": "{not json"},
            ]
        },
        {"toolCalls": [{"name": "echo", "arguments": {"text": 5}}]},
        {"text": "handled it"},
    ]
    status, events, _ = await run_one(p, redis, script_run(script))
    assert status == "completed"
    results = [e.payload for e in events if e.kind == "tool_result"]
    assert [r["isError"] for r in results] == [True, True, True, True]
    assert "disk on fire" in results[0]["content"]
    assert "not available" in results[1]["content"]
    assert "not valid JSON" in results[2]["content"]
    assert "invalid arguments" in results[3]["content"] and "text" in results[3]["content"]


async def test_retryable_tool_failures_are_retried(
    redis: Redis, redis_url: str, worker: WorkerProcess
) -> None:
    p = producer_for(redis, redis_url)
    script = [{"toolCalls": [{"name": "flaky", "arguments": {"failures": 2}}]}, {"text": "ok"}]
    status, events, _ = await run_one(p, redis, script_run(script))
    assert status == "completed"
    assert statuses(events).count("tool_retrying") == 2
    assert [e.payload["content"] for e in events if e.kind == "tool_result"] == ["ok after 3 attempts"]


async def test_max_iterations_with_on_limit_fail_fails_the_run_naming_the_limit(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    profiles = tmp_path / "profiles.json"
    strict = {"name": "strict", "provider": {"kind": "scripted", "mode": "script"}, "tools": ["echo"],
              "onLimit": "fail"}  # fmt: skip
    profiles.write_bytes(orjson.dumps({"profiles": [strict]}))
    p = producer_for(redis, redis_url, profiles=str(profiles))
    script = [{"toolCalls": [{"name": "echo", "arguments": {"text": "again"}}]}] * 10
    body = {**script_run(script, loopLimits={"maxIterations": 3}), "agent": "strict"}
    async with running_worker(redis_url, profiles=str(profiles)):
        status, events, result = await run_one(p, redis, body)
    assert status == "failed"
    assert result.last_error.code == "max_iterations"  # type: ignore[attr-defined]
    assert len([e for e in events if e.kind == "assistant_message"]) == 3
    assert events[-1].payload["error"]["code"] == "max_iterations"


async def test_max_run_duration_ends_a_stalled_run(
    redis: Redis, redis_url: str, worker: WorkerProcess
) -> None:
    p = producer_for(redis, redis_url)
    status, _, result = await run_one(
        p, redis, script_run([{"stall": True}], loopLimits={"maxRunDurationMs": 300})
    )
    assert status == "failed" and result.last_error.code == "max_run_duration"  # type: ignore[attr-defined]


async def test_mid_stream_failure_discards_the_partial_message(
    redis: Redis, redis_url: str, worker: WorkerProcess
) -> None:
    p = producer_for(redis, redis_url)
    script = [{"text": "partial words that never finish", "delayMs": 300, "error": {"status": 502, "afterChunks": 3}},
              {"text": "clean"}]  # fmt: skip
    status, events, result = await run_one(p, redis, script_run(script))
    assert status == "completed"
    kinds = [(e.kind.value, e.payload.get("status")) for e in events]
    discard = kinds.index(("status", "model_call_discarded"))
    assert any(
        k == "model_delta" for k, _ in kinds[:discard]
    )  # the partial deltas were published, then disowned
    assert result.final_assistant_message.content == "clean"  # type: ignore[attr-defined]


async def test_usage_accumulates(redis: Redis, redis_url: str, worker: WorkerProcess) -> None:
    p = producer_for(redis, redis_url)
    script = [{"toolCalls": [{"name": "echo", "arguments": {"text": "x"}}]}, {"text": "done and dusted"}]
    _, events, result = await run_one(p, redis, script_run(script))
    per_call = [e.payload["usage"] for e in events if e.kind == "assistant_message"]
    assert result.usage.output_tokens == sum(u["outputTokens"] for u in per_call) > 0  # type: ignore[attr-defined]
    assert result.usage.input_tokens == sum(u["inputTokens"] for u in per_call) > 0  # type: ignore[attr-defined]
