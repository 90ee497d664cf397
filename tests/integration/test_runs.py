"""The walking skeleton through real worker processes on a real redis-server."""

from __future__ import annotations

import pytest
from redis.asyncio import Redis

from producer.service import SubmissionError, Submitted
from tests.integration.helpers import (
    assert_clean_stream,
    producer_for,
    running_worker,
    script_run,
    stream,
    wait_all,
)
from tests.support.procs import workers
from tests.support.schema import K

pytestmark = pytest.mark.integration


async def test_hundred_runs_on_two_workers_complete_with_clean_streams(redis: Redis, redis_url: str) -> None:
    p = producer_for(redis, redis_url)
    items = []
    for i in range(100):
        if i % 3 == 0:
            items.append({"inputMessages": [{"role": "user", "content": f"what is {i} * 3 + 4?"}]})
        elif i % 3 == 1:
            items.append(
                script_run(
                    [{"toolCalls": [{"name": "echo", "arguments": {"text": f"n{i}"}}]}, {"text": "ok"}]
                )
            )
        else:
            items.append(script_run([{"text": f"plain answer {i}"}]))
    subs = await p.submit_many(items)
    assert all(isinstance(s, Submitted) and s.created for s in subs)
    run_ids = [s.run_id for s in subs if isinstance(s, Submitted)]
    with workers(redis_url, 2):
        recs = await wait_all(p, run_ids, timeout_s=90)
    assert {r.status.value for r in recs.values()} == {"completed"}
    tool_runs = 0
    for i, rid in enumerate(run_ids):
        events = await stream(redis, rid)
        assert_clean_stream(events)
        assert events[-1].payload["status"] == "completed"
        if any(e.kind == "tool_result" for e in events):
            tool_runs += 1
        if i % 3 == 0:
            assert recs[rid].result is not None and recs[rid].result.final_assistant_message is not None
            assert recs[rid].result.final_assistant_message.content == f"The answer is {i * 3 + 4}."
    assert tool_runs == 67
    assert await redis.zcard(K.live) == 0  # nothing left for the reconciler


async def test_same_run_id_twice_is_one_run(redis: Redis, redis_url: str) -> None:
    p = producer_for(redis, redis_url)
    body = script_run([{"text": "once"}], runId="run-same-1")
    first = await p.submit(body)
    second = await p.submit(body)
    assert first.created and not second.created and first.run_id == second.run_id == "run-same-1"
    assert await redis.zcard(K.queue) == 1
    with pytest.raises(SubmissionError) as exc:
        await p.submit(script_run([{"text": "different"}], runId="run-same-1"))
    assert exc.value.status == 409
    with workers(redis_url, 1):
        await wait_all(p, ["run-same-1"], timeout_s=30)
    events = await stream(redis, "run-same-1")
    assert_clean_stream(events)
    assert len(await redis.keys(K.events("run-same-1"))) == 1
    # Submitting again after it finished still names the same run and enqueues nothing.
    again = await p.submit(body)
    assert not again.created and again.status == "completed"
    assert await redis.zcard(K.queue) == 0


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"inputMessages": []}, "inputMessages"),
        ({"inputMessages": [{"role": "wizard", "content": "x"}]}, "inputMessages.0.role"),
        (
            {"inputMessages": [{"role": "user", "content": "x"}], "loopLimits": {"maxIterations": 0}},
            "loopLimits.maxIterations",
        ),
        ({"inputMessages": [{"role": "user", "content": "x"}], "runId": "has{brace}"}, "runId"),
        ({"inputMessages": [{"role": "user", "content": "x" * 100_001}]}, "inputMessages.0.content"),
        ({"inputMessages": [{"role": "user", "content": "x"}], "colour": "blue"}, "colour"),
        ({"inputMessages": [{"role": "user", "content": "x"}], "agent": "nobody"}, "agent"),
    ],
)
async def test_invalid_input_is_refused_naming_the_field(
    redis: Redis, redis_url: str, body: dict, field: str
) -> None:
    p = producer_for(redis, redis_url)
    with pytest.raises(SubmissionError) as exc:
        await p.submit(body)
    assert exc.value.field == field, exc.value.message
    assert field.split(".")[0] in exc.value.message
    assert await redis.dbsize() == 0  # nothing enqueued, nothing written


async def test_a_finished_run_expires_after_the_retention_and_its_stream_is_capped(
    redis: Redis, redis_url: str
) -> None:
    # 80 tool rounds publish over 240 events; the stream keeps about AGENTMILL_STREAM_MAXLEN of them
    # (XADD MAXLEN ~ trims whole nodes of 100 entries) and, like the run and its tool records,
    # expires AGENTMILL_RETENTION_S after the run ends.
    p = producer_for(redis, redis_url)
    script = [{"toolCalls": [{"name": "echo", "arguments": {"text": str(i)}}]} for i in range(80)]
    sub = await p.submit(script_run([*script, {"text": "done"}], loopLimits={"maxIterations": 100}))
    async with running_worker(redis_url, stream_maxlen=20, retention_s=600):
        rec = (await wait_all(p, [sub.run_id], 30))[sub.run_id]
    assert rec.status.value == "completed"
    last_seq = int(await redis.hget(K.run(sub.run_id), "lastSeq"))
    kept = await redis.xlen(K.events(sub.run_id))
    assert last_seq > 240 and 20 <= kept <= 20 + 100
    entries = await redis.xrange(K.events(sub.run_id))
    assert [int(f[b"seq"]) for _, f in entries] == list(range(last_seq - kept + 1, last_seq + 1))
    for key in (K.run(sub.run_id), K.events(sub.run_id), K.tools(sub.run_id)):
        assert 0 < await redis.ttl(key) <= 600, key


async def test_a_sessions_history_expires_after_the_retention(redis: Redis, redis_url: str) -> None:
    p = producer_for(redis, redis_url)
    script = [{"toolCalls": [{"name": "echo", "arguments": {"text": "x"}}]}, {"text": "ok"}]
    sub = await p.submit(script_run(script, sessionId="s-ttl", autoCreateSession=True))
    async with running_worker(redis_url, retention_s=600):
        assert (await wait_all(p, [sub.run_id], 15))[sub.run_id].status.value == "completed"
    sid = "s-ttl"
    for key in (
        K.session_loops(sid),
        K.session_results(sid),
        K.session_runs(sid),
    ):
        assert 0 < await redis.ttl(key) <= 600, key
    # The session record (its active and pending runs) is kept as long, once it is idle; it never
    # expires under a run: a run submitted meanwhile keeps it, and its end starts the retention again.
    assert 0 < await redis.ttl(K.session(sid)) <= 600
    again = await p.submit(script_run([{"text": "again"}], sessionId=sid))
    assert await redis.ttl(K.session(sid)) == -1
    assert await redis.hget(K.session(sid), "activeRun") == again.run_id.encode()
    async with running_worker(redis_url, retention_s=600):
        assert (await wait_all(p, [again.run_id], 15))[again.run_id].status.value == "completed"
    assert 0 < await redis.ttl(K.session(sid)) <= 600
    await redis.delete(K.session(sid))  # expired: the session is unknown, its runs' records stay
    with pytest.raises(SubmissionError) as refused:
        await p.submit(script_run([{"text": "late"}], sessionId=sid))
    assert (refused.value.code, refused.value.status) == ("unknown_session", 404)
    assert (await p.get(again.run_id)) is not None
