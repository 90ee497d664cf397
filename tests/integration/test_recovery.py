"""Crash recovery, graceful hand-back and Redis outages with real worker processes."""

from __future__ import annotations

import asyncio
import signal
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from redis.asyncio import Redis

from shared.fields import RunField
from tests.chaos.harness import chaos_profiles
from tests.integration.helpers import assert_clean_stream, producer_for, script_run, stream, wait_all
from tests.support.ledger import Ledger
from tests.support.procs import WorkerProc
from tests.support.redis_server import RedisServer
from tests.support.schema import K
from worker.core.preamble import unframe

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

FAST = {"AGENTMILL_LEASE_MS": "2000", "AGENTMILL_HEARTBEAT_MS": "300", "AGENTMILL_RECONCILE_MS": "300"}


def steps(n: int, delay_ms: int) -> list[dict]:
    return [
        {
            "text": f"step {i} ",
            "delayMs": delay_ms,
            "toolCalls": [{"name": "flaky", "arguments": {"failures": 0}}],
        }
        for i in range(n)
    ] + [{"text": "done"}]


def assert_resumed_not_restarted(events: list) -> None:
    per_call = Counter(e.payload["modelCallIndex"] for e in events if e.kind == "assistant_message")
    assert all(n == 1 for n in per_call.values()), per_call  # no checkpointed model call was asked again


async def owners(redis: Redis, run_ids: list[str]) -> dict[str, str]:
    return {r: (await redis.hget(K.run(r), "owner") or b"").decode() for r in run_ids}


@pytest.mark.parametrize("config", ["inline", "apart", "transcript"])
async def test_sigkill_mid_run_resumes_from_checkpoint_within_the_lease(
    redis: Redis, redis_url: str, config: str
) -> None:
    # apart (AGENTMILL_CHECKPOINT_CONFIG): the checkpoints leave the run's configuration out, the run
    # hash keeps it once; the rescuer puts it back (its own configuration could differ: it reads this one).
    # transcript: the transcript too (AGENTMILL_CHECKPOINT_TRANSCRIPT), in a key each commit appends to.
    env = {**FAST, "AGENTMILL_CHECKPOINT_CONFIG": "inline" if config == "inline" else "apart",
           "AGENTMILL_CHECKPOINT_TRANSCRIPT": "apart" if config == "transcript" else "inline"}  # fmt: skip
    p = producer_for(redis, redis_url)
    subs = await p.submit_many([script_run(steps(4, 300)) for _ in range(6)])
    ids = [s.run_id for s in subs]  # type: ignore[union-attr]
    victim = WorkerProc(redis_url, env={**env, "AGENTMILL_WORKER_ID": "victim"}).start()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:  # wait until the victim is mid-run with every run past step 1
        # (a tool's result committed: the number of events alone depends on how the deltas were paced)
        kinds = [{e.kind.value for e in await stream(redis, r)} for r in ids]
        if all("tool_result" in k for k in kinds):
            break
        await asyncio.sleep(0.05)
    assert set((await owners(redis, ids)).values()) == {"victim"}
    before = {r: len(await stream(redis, r)) for r in ids}
    victim.kill()
    t_kill = time.time()
    if config != "inline":
        for r in ids:
            h = await redis.hmget(K.run(r), ["ckpt", "config"])
            assert (
                orjson.loads(h[0])["state"].get("config") is None and orjson.loads(h[1])["maxIterations"] > 0
            )
    if config == "transcript":
        for r in ids:
            state = orjson.loads(await redis.hget(K.run(r), "ckpt"))["state"]
            held = orjson.loads(b"[%b]" % await redis.get(K.transcript(r)))
            assert state["transcript"] is None and len(held) >= 3  # the input, a reply and its tool's result
    rescuer = WorkerProc(redis_url, env={**env, "AGENTMILL_WORKER_ID": "rescuer"}).start()
    try:
        recs = await wait_all(p, ids, 40)
    finally:
        rescuer.stop()
    assert {r.status.value for r in recs.values()} == {"completed"}
    for r in ids:
        events = await stream(redis, r)
        assert_clean_stream(events)
        assert_resumed_not_restarted(events)
        resumed_at = next(e.ts for e in events[before[r] :]) / 1000.0
        assert resumed_at - t_kill < 2.0 + 0.3 + 3.0  # lease + sweep + start, independent of run length
        tools = {k.decode(): orjson.loads(v) for k, v in (await redis.hgetall(K.tools(r))).items()}
        assert all(t["state"] == "done" for t in tools.values()) and len(tools) == 4
        h = await redis.hgetall(K.run(r))
        assert int(h[RunField.CRASHES.encode()]) == 1 and int(h[b"epoch"]) == 2
        if (
            config == "transcript"
        ):  # the input, then each reply and each tool result, appended across the kill
            held = orjson.loads(b"[%b]" % await redis.get(K.transcript(r)))
            kinds = [e.kind for e in events]
            assert len(held) == 1 + kinds.count("assistant_message") + kinds.count("tool_result")
            assert [m["role"] for m in held[:3]] == ["user", "assistant", "tool"] and held[-1]["content"]


async def test_a_rolling_upgrade_and_its_roll_back_across_two_kills_lose_nothing(
    redis: Redis, redis_url: str
) -> None:
    """The checkpoint settings' upgrade path (docs/operations.md): runs started by a worker writing
    inline checkpoints (as a release without the settings does), SIGKILLed mid-run; resumed by a
    worker keeping both apart (the default), SIGKILLed mid-run; finished by an inline
    worker again (the roll-back). Each reads what the one before wrote: every call recorded, no
    event twice, no model call asked again, and the last reply sees the whole conversation."""
    n_steps = 6
    inline = {**FAST, "AGENTMILL_CHECKPOINT_CONFIG": "inline", "AGENTMILL_CHECKPOINT_TRANSCRIPT": "inline"}
    apart = {**FAST, "AGENTMILL_CHECKPOINT_CONFIG": "apart", "AGENTMILL_CHECKPOINT_TRANSCRIPT": "apart"}
    p = producer_for(redis, redis_url)
    script = [*steps(n_steps, 300)[:-1], {"echoContext": True}]
    ids = [s.run_id for s in await p.submit_many([script_run(script) for _ in range(4)])]  # type: ignore[union-attr]

    async def until(ok: Callable[[], Awaitable[bool]], what: str) -> None:
        deadline = time.monotonic() + 20
        while not await ok():
            assert time.monotonic() < deadline, what
            await asyncio.sleep(0.05)

    async def ckpt(r: str) -> dict[str, Any]:
        state: dict[str, Any] = orjson.loads(await redis.hget(K.run(r), "ckpt"))["state"]
        return state

    async def past_first_step() -> bool:
        return all([await redis.xlen(K.events(r)) >= 6 for r in ids])

    old = WorkerProc(redis_url, env={**inline, "AGENTMILL_WORKER_ID": "old"}).start()
    await until(past_first_step, "the old worker past every run's first step")
    old.kill()
    for r in ids:  # inline: the checkpoint carries both, no transcript key
        state = await ckpt(r)
        assert state["transcript"] and state["config"] is not None and not await redis.exists(K.transcript(r))

    new = WorkerProc(redis_url, env={**apart, "AGENTMILL_WORKER_ID": "new"}).start()

    async def all_written_apart() -> bool:
        return all([await redis.exists(K.transcript(r)) for r in ids])

    await until(all_written_apart, "the new worker's first commit of every run")
    await asyncio.sleep(0.5)  # a step or so more, appended
    new.kill()
    for r in ids:
        if (await redis.hget(K.run(r), "status")) == b"running":
            state = await ckpt(r)
            held = orjson.loads(b"[%b]" % await redis.get(K.transcript(r)))
            assert state["transcript"] is None and state.get("config") is None and len(held) >= 3

    back = WorkerProc(redis_url, env={**inline, "AGENTMILL_WORKER_ID": "back"}).start()
    try:
        recs = await wait_all(p, ids, 40)
    finally:
        back.stop()
    for r in ids:
        assert recs[r].status.value == "completed", recs[r].result
        events = await stream(redis, r)
        assert_clean_stream(events)
        assert_resumed_not_restarted(events)
        tools = {k.decode(): orjson.loads(v) for k, v in (await redis.hgetall(K.tools(r))).items()}
        assert len(tools) == n_steps and all(t["state"] == "done" for t in tools.values())
        h = await redis.hgetall(K.run(r))
        assert int(h[RunField.CRASHES.encode()]) == 2 and int(h[b"epoch"]) == 3
        answer = recs[r].result.final_assistant_message  # type: ignore[union-attr]
        seen = orjson.loads(answer.content)["messages"]  # type: ignore[union-attr]
        turns = [m for m in seen if m["role"] in ("assistant", "tool")]
        assert [m["role"] for m in turns] == ["assistant", "tool"] * n_steps
        assert [m["content"] for m in turns[::2]] == [f"step {i} " for i in range(n_steps)]
        assert [m["toolCallId"] for m in turns[1::2]] == [m["toolCalls"][0]["id"] for m in turns[::2]]


async def test_a_model_saying_call_0_every_round_killed_mid_round_never_reruns_a_recorded_call(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    """The model names every call call_0 (as servers that count per reply do). The worker is
    SIGKILLed while round 2's call is in flight: the rescuer runs that call again under its own key,
    never round 1's recorded one, and each round's call is answered with its own result."""

    def ledger_call(step: int, **more: int) -> dict[str, object]:
        return {"toolCalls": [{"id": "call_0", "name": "ledger", "arguments": {"step": step, **more}}]}

    script = [ledger_call(1), ledger_call(2, delayMs=1500), ledger_call(3), {"echoContext": True}]
    with Ledger() as ledger:
        profiles = str(chaos_profiles(ledger.url, tmp_path / "profiles.json"))
        env = {**FAST, "AGENTMILL_PROFILES": profiles}
        p = producer_for(redis, redis_url, profiles=profiles)
        rid = (await p.submit({**script_run(script), "agent": "chaos"})).run_id  # type: ignore[union-attr]
        victim = WorkerProc(redis_url, env=env).start()

        def steps_called(events: list) -> dict[int, str]:
            return {orjson.loads(e.payload["arguments"])["step"]: e.payload["toolCallId"]
                    for e in events if e.kind == "tool_call"}  # fmt: skip

        deadline = time.monotonic() + 20
        while 2 not in steps_called(await stream(redis, rid)) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.4)  # round 2's request is at the ledger (it answers after 1.5 s)
        victim.kill()
        rescuer = WorkerProc(redis_url, env=env).start()
        try:
            rec = (await wait_all(p, [rid], 40))[rid]
        finally:
            rescuer.stop()
        counts = ledger.counts()
    assert rec.status.value == "completed", rec.result
    events = await stream(redis, rid)
    assert_clean_stream(events)
    assert len(counts) == 3  # three calls, three effects (one Idempotency-Key each)
    key = {i: f"{rid}:{c}" for i, c in steps_called(events).items()}
    assert counts[key[1]] == 1 and counts[key[3]] == 1  # recorded calls never ran again
    assert counts[key[2]] in (1, 2)  # the one in flight ran again, under its own key
    assert steps_called(events) == {1: "c1.0", 2: "c2.0", 3: "c3.0"}
    assert next(e.payload["providerCallId"] for e in events if e.kind == "tool_call") == "call_0"
    assert [e.payload["toolCallId"] for e in events if e.kind == "tool_result"] == ["c1.0", "c2.0", "c3.0"]
    seen = orjson.loads(rec.result.final_assistant_message.content)["messages"]  # type: ignore[union-attr]
    answers = [
        (m["toolCallId"], orjson.loads(unframe(m["content"]))["recorded"])
        for m in seen
        if m["role"] == "tool"
    ]
    assert answers == [(c, key[i]) for i, c in steps_called(events).items()]  # each its own result


async def test_sigterm_hands_runs_back_at_a_checkpoint(redis: Redis, redis_url: str) -> None:
    p = producer_for(redis, redis_url)
    subs = await p.submit_many([script_run(steps(3, 400)) for _ in range(5)])
    ids = [s.run_id for s in subs]  # type: ignore[union-attr]
    first = WorkerProc(redis_url, env={**FAST, "AGENTMILL_SHUTDOWN_GRACE_S": "5"}).start()
    while len(await redis.keys(K.events("*"))) < len(ids):
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.3)
    first.signal(signal.SIGTERM)
    rc = await asyncio.to_thread(first.wait, 15)
    assert rc == 0  # it exited by itself, within the grace period
    for r in ids:
        h = await redis.hgetall(K.run(r))
        assert h[b"status"] in (b"queued", b"completed") and h[b"owner"] == b""  # handed back, not abandoned
    second = WorkerProc(redis_url, env=FAST).start()
    try:
        recs = await wait_all(p, ids, 30)
    finally:
        second.stop()
    assert {r.status.value for r in recs.values()} == {"completed"}
    for r in ids:
        events = await stream(redis, r)
        assert_clean_stream(events)
        assert_resumed_not_restarted(events)
        assert int((await redis.hget(K.run(r), RunField.CRASHES)) or 0) == 0  # a hand-back is not a crash


async def test_workers_survive_a_ten_second_redis_outage(tmp_path: object) -> None:
    with RedisServer(appendonly=True, appendfsync="always") as server:
        redis = Redis.from_url(server.url)
        try:
            p = producer_for(redis, server.url)
            subs = await p.submit_many([script_run(steps(3, 1500)) for _ in range(4)])
            ids = [s.run_id for s in subs]  # type: ignore[union-attr]
            w = WorkerProc(server.url, env={"AGENTMILL_LEASE_MS": "30000"}).start()
            try:
                while len(await redis.keys(K.events("*"))) < len(ids):
                    await asyncio.sleep(0.05)
                await asyncio.to_thread(server.restart, 10.0, kill=True)
                assert w.alive  # the worker rode out the outage
                await redis.aclose()
                redis = Redis.from_url(server.url)
                p = producer_for(redis, server.url)
                recs = await wait_all(p, ids, 60)
                assert w.alive
            finally:
                w.stop()
            assert {r.status.value for r in recs.values()} == {"completed"}
            for r in ids:
                assert_clean_stream(await stream(redis, r))
        finally:
            await redis.aclose()
