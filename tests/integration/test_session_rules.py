"""Session rules through a real worker and Redis: autoCreateSession without a sessionId names the
session after the run, and an aborted run leaves its session as it was."""

from __future__ import annotations

import orjson
import pytest
from redis.asyncio import Redis

from tests.integration.helpers import producer_for, script_run, until_status, wait_all
from worker.process.jobs import WorkerProcess

pytestmark = pytest.mark.integration


def said(text: str, script: list[dict[str, object]], **extra: object) -> dict[str, object]:
    return {**script_run(script, **extra), "inputMessages": [{"role": "user", "content": text}]}


async def test_auto_create_session_without_a_session_id_creates_one_named_after_the_run(
    redis: Redis, redis_url: str, worker: WorkerProcess
) -> None:
    p = producer_for(redis, redis_url)
    first = await p.submit(said("one", [{"text": "first"}], runId="solo", autoCreateSession=True))
    done = (await wait_all(p, [first.run_id], 10))["solo"]
    assert (
        done.status.value == "completed" and done.result is not None and done.result.session_id == "ses_solo"
    )
    view = await p.get_session("ses_solo")
    assert view is not None and view["runs"] == ["solo"]
    assert [(lp["user"]["content"], lp["assistant"]["content"]) for lp in view["history"]] == [
        ("one", "first")
    ]
    later = await p.submit(said("two", [{"echoContext": True}], sessionId="ses_solo"))  # a later turn sees it
    rec = (await wait_all(p, [later.run_id], 10))[later.run_id]
    seen = orjson.loads(rec.result.final_assistant_message.content)  # type: ignore[union-attr]
    assert [m["content"] for m in seen["messages"][1:3]] == ["one", "first"]


async def test_an_aborted_run_leaves_its_session_as_it_was(
    redis: Redis, redis_url: str, worker: WorkerProcess
) -> None:
    p = producer_for(redis, redis_url)
    kept = await p.submit(said("kept", [{"text": "kept answer"}], sessionId="s-ab", autoCreateSession=True))
    await wait_all(p, [kept.run_id], 10)
    before = await p.get_session("s-ab")
    echo = {"toolCalls": [{"name": "echo", "arguments": {"text": "half done"}}]}
    gone = await p.submit(said("dropped", [echo, {"text": "never", "delayMs": 5_000}], sessionId="s-ab"))
    await until_status(redis, gone.run_id, "running")
    assert await p.abort(gone.run_id) in ("requested", "aborted")
    assert (await wait_all(p, [gone.run_id], 10))[gone.run_id].status.value == "aborted"
    after = await p.get_session("s-ab")
    assert before is not None and after is not None
    # no turn and no message of the aborted run (the calls it executed are kept as calls: test_session_calls)
    assert after["history"] == before["history"]
    assert "dropped" not in orjson.dumps(after).decode() and "half done" not in orjson.dumps(after).decode()
    again = await p.submit(said("next", [{"echoContext": True}], sessionId="s-ab"))
    rec = (await wait_all(p, [again.run_id], 10))[again.run_id]
    seen = orjson.loads(rec.result.final_assistant_message.content)  # type: ignore[union-attr]
    assert [m["content"] for m in seen["messages"][1:]] == ["kept", "kept answer", "next"]
