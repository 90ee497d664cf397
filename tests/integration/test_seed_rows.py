"""The seeds' last rows (issue 31) through a real worker and Redis: the transcript on request,
the default cap on tool calls, the model widening and searching its own context."""

from __future__ import annotations

import pytest
from redis.asyncio import Redis

from tests.integration.helpers import assert_clean_stream, producer_for, script_run, stream, wait_all
from worker.jobs import WorkerProcess

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
    assert all(m.created_at for m in res.messages)
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
