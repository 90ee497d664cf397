"""Run control through a real worker and Redis: abort in every state, approvals, sessions."""

from __future__ import annotations

import asyncio
import itertools
import time

import orjson
import pytest
from redis.asyncio import Redis

from agentmill_client.models import RunEvent
from producer.service import Producer, SubmissionError
from shared.settings import Settings
from tests.integration.helpers import (
    assert_clean_stream,
    producer_for,
    running_worker,
    script_run,
    stream,
    until_status,
    wait_all,
)
from tests.support.round_trips import counted
from tests.support.schema import K
from worker.process.jobs import WorkerProcess

pytestmark = pytest.mark.integration


async def until_event(redis: Redis, run_id: str, pred: object, within: float = 15) -> list[RunEvent]:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        events = await stream(redis, run_id) if await redis.exists(K.events(run_id)) else []
        if any(pred(e) for e in events):  # type: ignore[operator]
            return events
        await asyncio.sleep(0.02)
    raise AssertionError(f"no matching event in {run_id}")


async def abort_and_time(p: Producer, run_id: str) -> float:
    t0 = time.monotonic()
    assert await p.abort(run_id, reason="user pressed stop") == "requested"
    rec = await p.wait(run_id, timeout_s=10)
    assert rec is not None and rec.status.value == "aborted"
    return time.monotonic() - t0


async def test_abort_mid_stream_stops_within_a_second(
    redis: Redis, redis_url: str, worker: WorkerProcess
) -> None:
    p = producer_for(redis, redis_url)
    sub = await p.submit(script_run([{"text": "a very long answer " * 50, "delayMs": 20_000}]))
    await until_event(redis, sub.run_id, lambda e: e.kind == "model_delta")
    assert await abort_and_time(p, sub.run_id) < 1.5
    events = await stream(redis, sub.run_id)
    assert_clean_stream(events)
    assert (
        events[-1].payload["status"] == "aborted"
        and events[-1].payload["error"]["message"] == "user pressed stop"
    )
    assert not any(e.kind == "assistant_message" for e in events)


async def test_abort_mid_tool_cancels_the_tool(redis: Redis, redis_url: str, worker: WorkerProcess) -> None:
    p = producer_for(redis, redis_url)
    sub = await p.submit(script_run([{"toolCalls": [{"name": "sleep", "arguments": {"ms": 30_000}}]}]))
    await until_event(redis, sub.run_id, lambda e: e.kind == "tool_call")
    await asyncio.sleep(0.1)
    assert await abort_and_time(p, sub.run_id) < 1.5
    assert not any(e.kind == "tool_result" for e in await stream(redis, sub.run_id))
    assert worker.deps.active == {}


async def test_abort_queued_run_never_starts(redis: Redis, redis_url: str) -> None:
    p = producer_for(redis, redis_url)
    sub = await p.submit(script_run([{"text": "never"}]))
    assert await p.abort(sub.run_id) == "aborted"
    wp = WorkerProcess(Settings(redis_url=redis_url, poll_delay_s=0.02))
    task = asyncio.create_task(wp.run())
    await asyncio.sleep(0.5)
    wp.request_stop()
    await task
    events = await stream(redis, sub.run_id)
    assert [e.payload["status"] for e in events] == ["aborted"]


async def test_abort_awaiting_approval_finished_and_unknown(
    redis: Redis, redis_url: str, worker: WorkerProcess
) -> None:
    p = producer_for(redis, redis_url)
    sub = await p.submit(script_run([{"toolCalls": [{"name": "echo", "arguments": {"text": "x"}}]}],
                                    toolPolicy={"requireApprovalByDefault": True}))  # fmt: skip
    # awaiting_human is not terminal: Producer.wait would only return at its timeout
    await until_status(redis, sub.run_id, "awaiting_human", 10)
    rec = await p.get(sub.run_id)
    assert rec is not None and rec.status.value == "awaiting_human"
    assert await p.abort(sub.run_id) == "aborted"
    events = await stream(redis, sub.run_id)
    assert_clean_stream(events)
    assert events[-1].payload["status"] == "aborted"
    # Ended by a script, not its worker: the iterations it reports are those the last commit passed.
    assert events[-1].payload["iterations"] == 1
    ended = await p.get(sub.run_id)
    assert ended is not None and ended.result is not None and ended.result.iterations == 1
    assert await p.abort(sub.run_id) == "finished"
    assert await p.abort("no-such-run") == "unknown"
    later = await p.submit(script_run([{"text": "later run"}]))
    rec = await p.wait(later.run_id, timeout_s=10)
    assert rec is not None and rec.status.value == "completed"


async def test_approval_pauses_without_holding_a_worker_and_resumes_elsewhere(
    redis: Redis, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = producer_for(redis, redis_url)
    script = [
        {"toolCalls": [{"id": "ok-1", "name": "flaky", "arguments": {"failures": 0}},
                       {"id": "no-1", "name": "echo", "arguments": {"text": "must not run"}}]},
        {"echoContext": True},
    ]  # fmt: skip
    sub = await p.submit(script_run(script, toolPolicy={"requireApprovalByDefault": True}))
    first = WorkerProcess(Settings(redis_url=redis_url, poll_delay_s=0.02))
    t1 = asyncio.create_task(first.run())
    # awaiting_human is not terminal: Producer.wait would only return at its timeout
    await until_status(redis, sub.run_id, "awaiting_human", 10)
    rec = await p.get(sub.run_id)
    assert rec is not None and rec.status.value == "awaiting_human"
    assert {a["toolCallId"] for a in rec.pending_approvals} == {"c1.0", "c1.1"}
    await asyncio.sleep(0.3)
    assert first.deps.active == {}  # the job ended: no slot held while a human thinks
    assert await redis.zcard(K.queue) == 0 and not await redis.keys("arq:in-progress:*")
    first.request_stop()
    await t1  # a worker restart in between changes nothing
    assert (await p.get(sub.run_id)).status.value == "awaiting_human"  # type: ignore[union-attr]
    with counted(monkeypatch) as n:  # a decision is one round trip (its script reads the dispatch)
        assert await p.settle_approval(sub.run_id, "c1.0", approved=True) == "recorded"
        assert await p.settle_approval(sub.run_id, "c1.1", approved=False, reason="not today") == "resumed"
        assert await p.settle_approval(sub.run_id, "c1.1", approved=True) in (
            "not_awaiting",
            "already_decided",
        )
    assert n[0] == 3, n[0]
    second = WorkerProcess(Settings(redis_url=redis_url, poll_delay_s=0.02))
    t2 = asyncio.create_task(second.run())
    rec = await p.wait(sub.run_id, timeout_s=10)
    second.request_stop()
    await t2
    assert rec is not None and rec.status.value == "completed"
    events = await stream(redis, sub.run_id)
    assert_clean_stream(events)
    results = {e.payload["toolCallId"]: e.payload for e in events if e.kind == "tool_result"}
    assert results["c1.0"]["content"] == "ok after 1 attempts" and not results["c1.0"]["isError"]
    assert results["c1.1"]["content"] == "rejected by a human: not today" and results["c1.1"]["isError"]
    tools = {k.decode(): orjson.loads(v) for k, v in (await redis.hgetall(K.tools(sub.run_id))).items()}
    assert (
        tools == {"c1.0": tools["c1.0"]} and tools["c1.0"]["attempts"] == 1
    )  # the rejected call was never claimed
    seen = orjson.loads(rec.result.final_assistant_message.content)  # type: ignore[union-attr]
    assert [m["role"] for m in seen["messages"]][-3:] == ["assistant", "tool", "tool"]


async def test_approval_timeout_ends_the_run(redis: Redis, redis_url: str) -> None:
    p = producer_for(redis, redis_url)
    sub = await p.submit(script_run([{"toolCalls": [{"name": "echo", "arguments": {}}]}],
                                    toolPolicy={"requireApprovalByDefault": True, "approvalTimeoutMs": 300}))  # fmt: skip
    wp = WorkerProcess(Settings(redis_url=redis_url, poll_delay_s=0.02, reconcile_ms=200))
    task = asyncio.create_task(wp.run())
    rec = await p.wait(
        sub.run_id, timeout_s=10
    )  # awaiting_human is not terminal: this returns at the timeout
    wp.request_stop()
    await task
    statuses = [e.payload["status"] for e in await stream(redis, sub.run_id) if e.kind == "status"]
    assert statuses == ["running", "awaiting_human", "failed"]
    assert rec is not None and rec.status.value == "failed"
    assert rec.result is not None and rec.result.last_error is not None
    assert rec.result.last_error.code == "approval_timeout"


async def test_run_deadline_ends_an_approval_wait_once(redis: Redis, redis_url: str) -> None:
    """maxRunDurationMs bounds a run parked for approval, which no worker holds: it ends failed with
    max_run_duration (error and terminal status once), and a later decision is refused."""
    p = producer_for(redis, redis_url)
    sub = await p.submit(script_run([{"toolCalls": [{"id": "c1", "name": "echo", "arguments": {}}]}],
                                    toolPolicy={"requireApprovalByDefault": True, "approvalTimeoutMs": 60_000},
                                    loopLimits={"maxRunDurationMs": 1_500}))  # fmt: skip
    wp = WorkerProcess(Settings(redis_url=redis_url, poll_delay_s=0.02, reconcile_ms=200))
    task = asyncio.create_task(wp.run())
    try:
        parked = await until_event(redis, sub.run_id, lambda e: e.payload.get("status") == "awaiting_human")
        assert len(parked) >= 2
        rec = await p.wait(sub.run_id, timeout_s=10)
    finally:
        wp.request_stop()
        await task
    assert rec is not None and rec.status.value == "failed"
    assert rec.result is not None and rec.result.last_error is not None
    assert rec.result.last_error.code == "max_run_duration"
    events = await stream(redis, sub.run_id)
    assert_clean_stream(events)
    statuses = [e.payload["status"] for e in events if e.kind == "status"]
    assert statuses == ["running", "awaiting_human", "failed"]
    assert [e.payload["code"] for e in events if e.kind == "error"] == ["max_run_duration"]
    assert await p.settle_approval(sub.run_id, "c1.0", approved=True) == "not_awaiting"
    assert (await p.get(sub.run_id)).status.value == "failed"  # type: ignore[union-attr]
    assert len(await stream(redis, sub.run_id)) == len(events)


async def test_a_decision_after_the_run_deadline_is_refused_and_ends_the_run(
    redis: Redis, redis_url: str
) -> None:
    """Past the deadline but before the reconciler's sweep, approving ends the run instead of resuming it."""
    p = producer_for(redis, redis_url)
    sub = await p.submit(script_run([{"toolCalls": [{"id": "c1", "name": "echo", "arguments": {}}]}],
                                    toolPolicy={"requireApprovalByDefault": True},
                                    loopLimits={"maxRunDurationMs": 800}))  # fmt: skip
    no_sweep = Settings(redis_url=redis_url, poll_delay_s=0.02, reconcile_ms=60_000)
    wp = WorkerProcess(no_sweep)
    task = asyncio.create_task(wp.run())
    try:
        await until_event(redis, sub.run_id, lambda e: e.payload.get("status") == "awaiting_human")
        await asyncio.sleep(1.0)
        assert (await p.get(sub.run_id)).status.value == "awaiting_human"  # type: ignore[union-attr]
        assert await p.settle_approval(sub.run_id, "c1.0", approved=True) == "not_awaiting"
        rec = await p.get(sub.run_id)
        await asyncio.sleep(0.3)
    finally:
        wp.request_stop()
        await task
    assert rec is not None and rec.status.value == "failed" and rec.result is not None
    assert rec.result.last_error is not None and rec.result.last_error.code == "max_run_duration"
    events = await stream(redis, sub.run_id)
    assert_clean_stream(events)
    assert [e.kind for e in events].count("tool_result") == 0  # the approved call never ran
    assert await redis.zscore(K.live, sub.run_id) is None


def session_body(sid: str, text: str, script: list[dict], **extra: object) -> dict:
    body = script_run(script, sessionId=sid, **extra)
    body["inputMessages"] = [{"role": "user", "content": text}]
    return body


async def test_sessions_see_reduced_history_and_recall_past_results(
    redis: Redis, redis_url: str, worker: WorkerProcess
) -> None:
    p = producer_for(redis, redis_url)
    with pytest.raises(SubmissionError) as exc:
        await p.submit(session_body("s-unknown", "hi", [{"text": "x"}]))
    assert exc.value.code == "unknown_session"
    long_reply = "R" * 900
    r1 = await p.submit(session_body("s1", "first question", [
        {"toolCalls": [{"id": "t-1", "name": "echo", "arguments": {"text": "secret tool output"}}]},
        {"text": long_reply}], autoCreateSession=True))  # fmt: skip
    await wait_all(p, [r1.run_id], 10)
    r2 = await p.submit(session_body("s1", "second question", [{"text": "second answer"}]))
    await wait_all(p, [r2.run_id], 10)
    r3 = await p.submit(session_body("s1", "third question", [
        {"echoContext": True, "toolCalls": [{"id": "t-3", "name": "recall_tool_call", "arguments": {"callId": f"{r1.run_id}/c1.0"}}]},
        {"text": "done"}]))  # fmt: skip
    recs = await wait_all(p, [r3.run_id], 10)
    assert recs[r3.run_id].status.value == "completed"
    events = await stream(redis, r3.run_id)
    seen = orjson.loads(
        next(e for e in events if e.kind == "assistant_message").payload["message"]["content"]
    )
    msgs = [(m["role"], m["content"]) for m in seen["messages"]]
    assert msgs[0][0] == "system"
    assert msgs[1:] == [
        ("user", "first question"),
        ("assistant", f"[tool calls, recallable by id with recall_tool_call: {r1.run_id}/c1.0 echo]\n" + "R" * 500 + "…[truncated]"),
        ("user", "second question"), ("assistant", "second answer"),
        ("user", "third question"),
    ]  # fmt: skip
    assert "secret tool output" not in str(seen)  # past tool results are not in the model input…
    assert "recall_tool_call" in seen["tools"]
    recalled = next(e for e in events if e.kind == "tool_result")
    assert recalled.payload["content"] == "secret tool output"  # …but are reachable through recall_tool_call
    loops = await redis.lrange(K.session_loops("s1"), 0, -1)
    assert len(loops) == 3


async def run_windows(redis: Redis, run_ids: list[str]) -> list[tuple[int, int]]:
    """When each run that ran was running: from its `running` status to its last event. A run
    interrupted while still queued never ran (its stream holds only its ending): no window."""
    out = []
    for rid in run_ids:
        ev = await stream(redis, rid)
        started = [e.ts for e in ev if e.kind == "status" and e.payload.get("status") == "running"]
        if started:
            out.append((started[0], ev[-1].ts))
    return out


@pytest.mark.parametrize("strategy", ["enqueue", "interrupt"])
async def test_one_run_per_session_at_a_time(redis: Redis, redis_url: str, strategy: str) -> None:
    p = producer_for(redis, redis_url)
    wps = [WorkerProcess(Settings(redis_url=redis_url, poll_delay_s=0.02)) for _ in range(2)]
    tasks = [asyncio.create_task(w.run()) for w in wps]
    try:
        ids = []
        for i in range(3):
            extra = {"autoCreateSession": True} if i == 0 else {"multitaskStrategy": strategy}
            delay = 400 if strategy == "enqueue" else 5_000
            sub = await p.submit(
                session_body(
                    f"s-{strategy}", f"q{i}", [{"text": f"answer {i} " * 5, "delayMs": delay}], **extra
                )
            )
            ids.append(sub.run_id)
            await asyncio.sleep(0.3)
            if strategy == "interrupt" and i == 1:
                # The interrupted run ends when its worker hears of it (its next beat, up to
                # heartbeat_ms later): the third run interrupts the second only after that.
                assert await p.wait(ids[0], timeout_s=5) is not None
        recs = await wait_all(p, ids, 20)
    finally:
        for w in wps:
            w.request_stop()
        await asyncio.gather(*tasks)
    windows = await run_windows(redis, ids)
    for (_, end_prev), (start_next, _) in itertools.pairwise(windows):
        assert start_next >= end_prev, windows  # never two runs of one session at once
    statuses = [recs[r].status.value for r in ids]
    if strategy == "enqueue":
        assert statuses == ["completed"] * 3
    else:
        assert statuses == ["aborted", "aborted", "completed"]
        assert recs[ids[0]].result.last_error.message == f"interrupted by run {ids[1]}"  # type: ignore[union-attr]
        assert recs[ids[1]].result.last_error.message == f"interrupted by run {ids[2]}"  # type: ignore[union-attr]


async def test_a_burst_of_submissions_on_one_session_runs_one_at_a_time(redis: Redis, redis_url: str) -> None:
    # Six submissions race each other (one connection each) while the session's first run is
    # running on one of two workers: the submit script must queue every one of them.
    p = producer_for(redis, redis_url)
    clients = [Redis.from_url(redis_url) for _ in range(6)]
    try:
        async with running_worker(redis_url), running_worker(redis_url):
            first = await p.submit(
                session_body("s-burst", "q0", [{"text": "first", "delayMs": 300}], autoCreateSession=True)
            )
            await until_event(redis, first.run_id, lambda e: e.kind == "status")
            burst = await asyncio.gather(
                *(
                    producer_for(c, redis_url).submit(
                        session_body("s-burst", f"q{i}", [{"text": f"answer {i}", "delayMs": 50}])
                    )
                    for i, c in enumerate(clients, 1)
                )
            )
            ids = [first.run_id, *(s.run_id for s in burst)]
            recs = await wait_all(p, ids, 30)
    finally:
        for c in clients:
            await c.aclose()
    assert {r.status.value for r in recs.values()} == {"completed"}
    windows = sorted(await run_windows(redis, ids))
    for (_, end_prev), (start_next, _) in itertools.pairwise(windows):
        assert start_next >= end_prev, windows


async def test_reject_strategy_refuses_while_busy(
    redis: Redis, redis_url: str, worker: WorkerProcess
) -> None:
    p = producer_for(redis, redis_url)
    first = await p.submit(
        session_body("s-rej", "q0", [{"text": "slow", "delayMs": 600}], autoCreateSession=True)
    )
    with pytest.raises(SubmissionError) as exc:
        await p.submit(session_body("s-rej", "q1", [{"text": "x"}], multitaskStrategy="reject"))
    assert exc.value.code == "session_busy" and exc.value.status == 409
    await wait_all(p, [first.run_id], 10)
    later = await p.submit(session_body("s-rej", "q2", [{"text": "x"}], multitaskStrategy="reject"))
    assert (await wait_all(p, [later.run_id], 10))[later.run_id].status.value == "completed"


async def test_context_overflow_compacts_and_retries_a_bounded_number_of_times(
    redis: Redis, redis_url: str, worker: WorkerProcess
) -> None:
    p = producer_for(redis, redis_url)
    overflow = {"error": {"status": 400, "code": "context_length_exceeded", "message": "too long"}}
    ok = await p.submit(script_run([overflow, {"text": "fits now"}]))
    bad = await p.submit(script_run([overflow] * 6))
    recs = await wait_all(p, [ok.run_id, bad.run_id], 15)
    assert recs[ok.run_id].status.value == "completed"
    kinds = [
        (e.kind.value, e.payload.get("status"), e.payload.get("reason"))
        for e in await stream(redis, ok.run_id)
    ]
    assert ("status", "compacting", "overflow") in kinds and any(k == "compaction" for k, _, _ in kinds)
    assert recs[bad.run_id].status.value == "failed"
    assert recs[bad.run_id].result.last_error.code == "context_overflow"  # type: ignore[union-attr]


async def test_compaction_by_threshold_uses_the_model_when_configured(
    redis: Redis, redis_url: str, tmp_path: object
) -> None:
    import pathlib

    path = pathlib.Path(str(tmp_path)) / "profiles.json"
    path.write_bytes(
        orjson.dumps(
            {
                "profiles": [
                    {"name": "compacting", "provider": {"kind": "scripted", "mode": "script"}, "tools": ["echo"],
                     "compaction": {"maxMessages": 6, "keepRecent": 2, "useModel": True}}
                ]
            }
        )
    )  # fmt: skip
    from shared.profiles import load_profiles

    p = producer_for(redis, redis_url)
    p.profiles = load_profiles(str(path))
    script = [{"toolCalls": [{"name": "echo", "arguments": {"text": f"r{i}"}}]} for i in range(5)] + [
        {"echoContext": True}
    ]
    body = script_run(script)
    body["agent"] = "compacting"
    sub = await p.submit(body)
    wp = WorkerProcess(Settings(redis_url=redis_url, poll_delay_s=0.02, profiles=str(path)))
    task = asyncio.create_task(wp.run())
    recs = await wait_all(p, [sub.run_id], 20)
    wp.request_stop()
    await task
    assert recs[sub.run_id].status.value == "completed"
    events = await stream(redis, sub.run_id)
    compactions = [e.payload for e in events if e.kind == "compaction"]
    assert compactions and all(c["reason"] == "threshold" for c in compactions)
    seen = orjson.loads(recs[sub.run_id].result.final_assistant_message.content)  # type: ignore[union-attr]
    contents = [m["content"] for m in seen["messages"]]
    assert any(
        "earlier messages were compacted" in c and "(scripted)" in c for c in contents
    )  # the model's summary
    assert len(seen["messages"]) <= 1 + 6 + 2  # system + threshold + the step that crossed it


async def test_session_view_lists_runs_and_history(
    redis: Redis, redis_url: str, worker: WorkerProcess
) -> None:
    p = producer_for(redis, redis_url)
    a = await p.submit(session_body("s-view", "one", [{"text": "first"}], autoCreateSession=True))
    await wait_all(p, [a.run_id], 10)
    b = await p.submit(session_body("s-view", "two", [{"text": "second"}]))
    await wait_all(p, [b.run_id], 10)
    view = await p.get_session("s-view")
    assert view is not None and view["runs"] == [a.run_id, b.run_id] and view["activeRun"] is None
    assert [(lp["user"]["content"], lp["assistant"]["content"]) for lp in view["history"]] == [
        ("one", "first"),
        ("two", "second"),
    ]
    assert await p.get_session("s-view", tenant="other") is None
    assert await p.get_session("nope") is None
