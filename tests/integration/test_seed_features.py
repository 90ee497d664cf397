"""Seed features through a real worker and Redis: error events, limits that end with an answer,
runtimeInitData, recall (issue 17)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import orjson
import pytest
from redis.asyncio import Redis

from tests.integration.helpers import (
    assert_clean_stream,
    producer_for,
    running_worker,
    script_run,
    stream,
    wait_all,
)
from worker.jobs import WorkerProcess

pytestmark = pytest.mark.integration


@pytest.fixture
async def worker(redis_url: str) -> AsyncIterator[WorkerProcess]:
    async with running_worker(redis_url) as wp:
        yield wp


async def test_failed_model_calls_and_tool_errors_are_error_events(
    redis: Redis, redis_url: str, worker: WorkerProcess
) -> None:
    p = producer_for(redis, redis_url)
    sub = await p.submit(script_run([
        {"error": {"status": 503, "message": "busy"}},
        {"toolCalls": [{"id": "f1", "name": "fail", "arguments": {"message": "broken"}},
                       {"id": "ok", "name": "echo", "arguments": {"text": "x"}}]},
        {"error": {"status": 400, "message": "bad request"}},
    ]))  # fmt: skip
    rec = (await wait_all(p, [sub.run_id], 15))[sub.run_id]
    assert rec.status.value == "failed"
    events = await stream(redis, sub.run_id)
    assert_clean_stream(events)
    errs = [(e.payload["scope"], e.payload["code"]) for e in events if e.kind == "error"]
    assert errs == [
        ("model", "model_http_503"), ("tool", "tool_failed"), ("model", "model_http_400"), ("run", "model_http_400")
    ]  # fmt: skip
    tool_err = next(e.payload for e in events if e.kind == "error" and e.payload["scope"] == "tool")
    assert tool_err["toolCallId"] == "f1" and "broken" in tool_err["message"]


async def test_a_run_at_its_iteration_limit_completes_with_an_answer_and_stop_reason(
    redis: Redis, redis_url: str, worker: WorkerProcess
) -> None:
    p = producer_for(redis, redis_url)
    echo = {"toolCalls": [{"name": "echo", "arguments": {"text": "found it"}}]}
    sub = await p.submit(script_run([echo, echo, {"echoContext": True}, {"text": "never asked"}],
                                    loopLimits={"maxIterations": 2}))  # fmt: skip
    rec = (await wait_all(p, [sub.run_id], 15))[sub.run_id]
    assert rec.status.value == "completed" and rec.result is not None
    assert rec.result.stop_reason == "max_iterations" and rec.result.iterations == 3
    seen = orjson.loads(rec.result.final_assistant_message.content)  # type: ignore[union-attr]
    assert seen["tools"] == []  # the last call offers no tools…
    assert seen["messages"][-1]["role"] == "user" and "final answer" in seen["messages"][-1]["content"]
    assert [m["content"] for m in seen["messages"] if m["role"] == "tool"] == ["found it", "found it"]
    events = await stream(redis, sub.run_id)
    assert_clean_stream(events)
    assert events[-1].payload["stopReason"] == "max_iterations"
    assert any(e.payload.get("status") == "limit_reached" for e in events)
