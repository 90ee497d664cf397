"""A tool declared ``sideEffects: false``: its reply and its result go out in one commit
(AGENTMILL_STEP_HOLD_MS), through commit.lua on a real Redis, and a worker SIGKILLed while it holds
them writes nothing twice. Unit tests of the hold itself: tests/unit/test_step_hold.py."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from redis.asyncio import Redis

from agentmill_client.models import RunEvent
from producer.run_record import RunRecord
from producer.service import Producer
from shared.fields import RunField
from tests.chaos.harness import chaos_profiles
from tests.integration.helpers import (
    assert_clean_stream,
    producer_for,
    script_run,
    stream,
    until_status,
    wait_all,
)
from tests.integration.test_failpoints import FAST, chaos_run
from tests.support.ledger import Ledger
from tests.support.procs import WorkerProc, wait_until
from tests.support.schema import K

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def declared(
    ledger: Ledger, tmp_path: Path, redis: Redis, redis_url: str, **env: str
) -> tuple[dict[str, str], Producer]:
    """The chaos profile (an HTTP ledger tool) with the ledger declared sideEffects: false: a worker's
    environment for it (``env`` on top) and a producer that knows it."""
    path = chaos_profiles(ledger.url, tmp_path / "d.json", declared=True)
    return {**FAST, "AGENTMILL_PROFILES": str(path), **env}, producer_for(
        redis, redis_url, profiles=str(path)
    )


async def script_calls(redis: Redis) -> int:
    stats = await redis.info("commandstats")
    return sum(int(stats.get(f"cmdstat_{c}", {}).get("calls", 0)) for c in ("fcall", "evalsha", "eval"))


async def counted_run(
    redis: Redis,
    redis_url: str,
    env: dict[str, str],
    run: Callable[[list[Any]], dict[str, Any]],
    steps: list[Any],
) -> tuple[RunRecord, int]:
    """A run of ``steps`` on a worker of its own started with ``env``, after a warm-up run that keeps
    the worker's start-up out of the count: its record, and the script calls made meanwhile. The
    hold's window is 2 s here (50 ms by default): what is counted is a step's commits when its tool
    ends within the window, not whether a loaded machine's loop lags past 50 ms."""
    p = producer_for(redis, redis_url, profiles=env.get("AGENTMILL_PROFILES"))
    w = WorkerProc(redis_url, env={**FAST, "AGENTMILL_STEP_HOLD_MS": "2000", **env}).start()
    try:
        warm = await p.submit(run([{"text": "warm"}]))
        await wait_all(p, [warm.run_id], 30)
        before = await script_calls(redis)
        sub = await p.submit(run(steps))
        rec = (await wait_all(p, [sub.run_id], 30))[sub.run_id]
        return rec, await script_calls(redis) - before
    finally:
        w.stop()


async def ended_clean(redis: Redis, rec: RunRecord, status: str) -> list[RunEvent]:
    """The run ended with ``status``; its stream, checked clean (seq 1..n, one terminal status)."""
    assert rec.status.value == status, rec.result
    events = await stream(redis, rec.run_id)
    assert_clean_stream(events)
    return events


STEPS = [{"toolCalls": [{"name": "ledger", "arguments": {"step": i}}]} for i in range(4)] + [{"text": "done"}]
ONE_CALL = [{"toolCalls": [{"name": "ledger", "arguments": {"step": 1}}]}, {"text": "done"}]
BUILTIN_STEPS = [
    {"toolCalls": [{"name": "echo", "arguments": {"text": "a"}}]},
    {"toolCalls": [{"name": "calculator", "arguments": {"expression": "6*7"}}]},
    {"toolCalls": [{"name": "echo", "arguments": {"text": "b"}}]},
    {"toolCalls": [{"name": "calculator", "arguments": {"expression": "1+1"}}]},
    {"text": "done"},
]


def opted_in(path: Path) -> Path:
    """The built-in ``scripted`` profile, its echo and calculator declared ``sideEffects: true``."""
    scripted = {"name": "scripted", "provider": {"kind": "scripted", "mode": "script"},
                "tools": ["calculator", "echo"], "loopLimits": {"maxIterations": 100},
                "toolSettings": {"echo": {"sideEffects": True}, "calculator": {"sideEffects": True}}}  # fmt: skip
    path.write_bytes(orjson.dumps({"profiles": [scripted]}))
    return path


async def test_declared_tool_steps_take_one_commit_each_on_redis(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    """The same four-step run, its tool undeclared and declared: the declared one makes four script
    calls fewer (a reply and its result in one commit), with the same stream and records."""
    calls, kinds = {}, {}
    with Ledger() as ledger:
        for name, path in (
            ("undeclared", chaos_profiles(ledger.url, tmp_path / "u.json")),
            ("declared", chaos_profiles(ledger.url, tmp_path / "d.json", declared=True)),
        ):
            rec, calls[name] = await counted_run(
                redis, redis_url, {"AGENTMILL_PROFILES": str(path)}, chaos_run, STEPS
            )
            kinds[name] = [e.kind for e in await ended_clean(redis, rec, "completed")]
            tools = await redis.hgetall(K.tools(rec.run_id))
            assert len(tools) == 4 and all(orjson.loads(v)["state"] == "done" for v in tools.values())
            claims = await redis.hget(K.run(rec.run_id), RunField.CLAIMS)
            assert not claims  # no claim left open
        assert sum(ledger.counts().values()) == 8  # each call once, in both runs
    assert kinds["declared"] == kinds["undeclared"]
    # the worker's own polling and heartbeats are script calls too: allow a few either way
    assert calls["undeclared"] - calls["declared"] >= 3, calls


async def test_built_in_steps_take_one_commit_each_unless_the_profile_says_they_have_effects(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    """calculator and echo declare themselves without side effects: a profile that says nothing of
    them makes four script calls fewer for four tool steps than one with ``sideEffects: true``."""
    calls, kinds = {}, {}
    for name, env in (
        ("default", {}),
        ("opted_in", {"AGENTMILL_PROFILES": str(opted_in(tmp_path / "o.json"))}),
    ):
        rec, calls[name] = await counted_run(redis, redis_url, env, script_run, BUILTIN_STEPS)
        events = await ended_clean(redis, rec, "completed")
        kinds[name] = [e.kind for e in events]
        assert [e.payload["content"] for e in events if e.kind == "tool_result"] == ["a", "42", "b", "2"]
        assert not await redis.hget(K.run(rec.run_id), RunField.CLAIMS)  # no claim left open
    assert kinds["default"] == kinds["opted_in"]
    # the worker's own polling and heartbeats are script calls too: allow a few either way
    assert calls["opted_in"] - calls["default"] >= 3, calls


async def test_a_worker_killed_while_it_holds_a_reply_writes_nothing_twice(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    """SIGKILL after the declared call ran, before the commit that would have written its reply and
    result: the next worker asks the model again and runs the call again (what the declaration
    allows), and the stream holds each event once."""
    with Ledger() as ledger:
        env, p = declared(ledger, tmp_path, redis, redis_url)
        sub = await p.submit(chaos_run(ONE_CALL))
        # a hold long enough for a first HTTP call on a loaded machine: the reply waits for the result
        doomed = WorkerProc(
            redis_url,
            env={**env, "AGENTMILL_FAILPOINTS": "after_tool_effect:1", "AGENTMILL_STEP_HOLD_MS": "5000"},
        ).start()
        assert wait_until(lambda: not doomed.alive, 30), "the worker never reached after_tool_effect"
        held = await stream(redis, sub.run_id)
        assert "assistant_message" not in [e.kind for e in held]  # the reply was held, not written
        assert not await redis.hget(K.run(sub.run_id), RunField.CLAIMS)  # nor the call's claim
        rescuer = WorkerProc(redis_url, env=env).start()
        try:
            rec = (await wait_all(p, [sub.run_id], 30))[sub.run_id]
        finally:
            rescuer.stop()
        counts = ledger.counts()
    events = await ended_clean(redis, rec, "completed")
    kinds = [e.kind for e in events]
    assert kinds.count("assistant_message") == 2 and kinds.count("tool_call") == 1
    assert kinds.count("tool_result") == 1
    call_id = next(e.payload["toolCallId"] for e in events if e.kind == "tool_call")
    assert counts == {f"{sub.run_id}:{call_id}": 2}  # run again, under the same key
    assert not [e for e in events if e.kind == "status" and e.payload["status"] == "tool_reexecuted"]


async def test_an_approved_declared_call_is_written_with_its_decision_once_it_ran(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    """Approval first (the reply and the pending approval are written when the run parks); once
    approved, the decision's events (but its approval, which the decision writes itself) wait for
    the declared call and go out with its result."""
    with Ledger() as ledger:
        env, p = declared(ledger, tmp_path, redis, redis_url)
        sub = await p.submit({**chaos_run(ONE_CALL), "toolPolicy": {"requireApprovalByDefault": True}})
        w = WorkerProc(redis_url, env=env).start()
        try:
            await until_status(redis, sub.run_id, "awaiting_human", 30)
            parked = [e.kind for e in await stream(redis, sub.run_id)]
            assert "assistant_message" in parked and "tool_result" not in parked
            assert await p.settle_approval(sub.run_id, "c1.0", approved=True) == "resumed"
            rec = (await wait_all(p, [sub.run_id], 30))[sub.run_id]
        finally:
            w.stop()
        counts = ledger.counts()
    events = await ended_clean(redis, rec, "completed")
    assert [e.kind for e in events].count("tool_result") == 1
    assert counts == {f"{sub.run_id}:c1.0": 1}
    record = orjson.loads(await redis.hget(K.tools(sub.run_id), "c1.0") or b"{}")
    assert record["state"] == "done" and record["attempts"] == 1
    assert not await redis.hget(K.run(sub.run_id), RunField.CLAIMS)


async def test_an_abort_while_a_reply_is_held_writes_the_reply_before_the_ending(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    """The call outlives the hold's start but not its end (a 10 s hold, a 3 s ledger answer): an
    abort meanwhile ends the run at once, and the held reply goes out in the ending's commit, before
    its status."""
    with Ledger() as ledger:
        env, p = declared(ledger, tmp_path, redis, redis_url, AGENTMILL_STEP_HOLD_MS="10000")
        body = chaos_run(
            [{"toolCalls": [{"name": "ledger", "arguments": {"step": 1, "delayMs": 3000}}]}, {"text": "done"}]
        )
        sub = await p.submit(body)
        w = WorkerProc(redis_url, env=env).start()
        try:
            assert wait_until(lambda: bool(ledger.arrived), 30), "the call never reached the ledger"
            assert "assistant_message" not in [e.kind for e in await stream(redis, sub.run_id)]  # held
            assert await p.abort(sub.run_id, reason="stop") == "requested"
            rec = (await wait_all(p, [sub.run_id], 10))[sub.run_id]
        finally:
            w.stop()
    events = await ended_clean(redis, rec, "aborted")
    kinds = [e.kind for e in events]
    assert kinds.index("assistant_message") < kinds.index("tool_call") < len(kinds) - 1
    assert "tool_result" not in kinds and events[-1].payload["status"] == "aborted"
