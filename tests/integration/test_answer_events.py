"""A parked run's answer writes the run's next event itself: the script that records a client's tool
results (tool_results.lua) or a human's last decision (settle_approval.lua) appends the first event
the resumed run's machine would write (its first call's ``tool_result``, its first call's
``approval``) in the same call, and names it in the run hash (RunField.ANSWERED); the worker that
takes the run up leaves the machine's own out (worker/runner/opening.py), also when the first one
to take it dies before its first commit. Each answer here comes while no worker runs, so the event
can only be the script's."""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any

import orjson
import pytest
from redis.asyncio import Redis

from agentmill_client.models import ClientToolResult, RunEvent
from producer.service import Producer
from shared import payload_crypto
from shared.actors import actor
from shared.fields import RunField as F
from shared.scripts import Scripts
from tests.integration.helpers import (
    assert_clean_stream,
    producer_for,
    script_run,
    stream,
    until_status,
    wait_all,
)
from tests.integration.test_failpoints import chaos_run
from tests.integration.test_step_hold import ONE_CALL, declared
from tests.support.ledger import Ledger
from tests.support.procs import WorkerProc, wait_until
from tests.support.schema import K, parts_of
from worker.adapters.worker_beat import beat

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

LOOKUP = {"name": "lookup", "description": "Look a customer up.",
          "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}  # fmt: skip
WHO = actor("k-7", "ops")


def crm(path: Path) -> str:
    path.write_bytes(orjson.dumps({"profiles": [
        {"name": "crm", "provider": {"kind": "scripted", "mode": "script"}, "tools": ["echo"],
         "runClientTools": ["lookup"]},
    ]}))  # fmt: skip
    return str(path)


def lookup_run() -> dict[str, Any]:
    """A run of the crm agent whose model calls the client's ``lookup`` once, then answers."""
    script = [{"toolCalls": [{"name": "lookup", "arguments": {"q": "ACME"}}]}, {"text": "ok"}]
    return {**script_run(script), "agent": "crm", "clientTools": [LOOKUP]}


async def parked(redis: Redis, p: Producer, env: dict[str, str], body: dict[str, Any], status: str) -> str:
    """The run submitted, parked by a worker that then stops: no worker runs when it is answered."""
    return (await parked_runs(redis, p, env, body, status, 1))[0]


async def parked_runs(
    redis: Redis, p: Producer, env: dict[str, str], body: dict[str, Any], status: str, n: int
) -> list[str]:
    """``n`` runs of ``body``, parked as ``parked`` parks one (by one worker)."""
    subs = [await p.submit(body) for _ in range(n)]
    w = WorkerProc(p.settings.redis_url, env=env).start()
    try:
        for sub in subs:
            await until_status(redis, sub.run_id, status, 30)
    finally:
        w.stop()
    return [sub.run_id for sub in subs]


async def finished(redis: Redis, p: Producer, env: dict[str, str], run_id: str) -> list[RunEvent]:
    """The run finished by a new worker: its stream, checked clean (seq 1..n, one ending)."""
    w = WorkerProc(p.settings.redis_url, env=env).start()
    try:
        rec = (await wait_all(p, [run_id], 30))[run_id]
    finally:
        w.stop()
    assert rec.status.value == "completed", rec.result
    events = await stream(redis, run_id)
    assert_clean_stream(events)
    return events


def after(events: list[RunEvent], status: str) -> list[tuple[str, Any]]:
    """(kind, toolCallId) of the events after the run's last ``status`` event (where it parked)."""
    at = max(i for i, e in enumerate(events) if e.kind == "status" and e.payload["status"] == status)
    return [(e.kind, e.payload.get("toolCallId")) for e in events[at + 1 :]]


async def test_a_client_result_is_written_as_the_runs_next_event_by_its_post(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    path = crm(tmp_path / "p.json")
    p, env = producer_for(redis, redis_url, profiles=path), {"AGENTMILL_PROFILES": path}
    rid = await parked(redis, p, env, lookup_run(), "awaiting_tools")
    before = await stream(redis, rid)
    results = [ClientToolResult(tool_call_id="c1.0", content="12 open orders", is_error=True)]
    assert (await p.post_tool_results(rid, results, actor=WHO))[0] == "resumed"
    written = await stream(redis, rid)
    assert len(written) == len(before) + 1  # in the post's own call
    called_at = next(e.payload["calledAt"] for e in before if e.kind == "tool_call")
    ev = written[-1]
    assert (ev.kind, ev.payload) == ("tool_result", {"toolCallId": "c1.0", "name": "lookup", "content": "12 open orders",
                                                     "isError": True, "calledAt": called_at, "actor": WHO})  # fmt: skip
    assert await redis.hget(K.run(rid), F.ANSWERED) == f"{ev.seq}:tool_result:c1.0".encode()
    events = await finished(redis, p, env, rid)
    assert events[: len(written)] == written
    # the machine's own tool_result left out; the error event beside an error result still its own
    assert after(events, "awaiting_tools")[:2] == [("tool_result", "c1.0"), ("error", "c1.0")]
    assert not [e for e in events if e.kind == "status" and e.payload["status"] == "model_call_restarted"]


async def test_the_last_decision_writes_the_approval_of_the_rounds_first_call(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    """Two calls wait; the second is decided first: the last decision writes the first call's approval
    (the machine's order), the worker the rest in that order."""
    path = crm(tmp_path / "p.json")
    p, env = producer_for(redis, redis_url, profiles=path), {"AGENTMILL_PROFILES": path}
    calls = [{"name": "echo", "arguments": {"text": t}} for t in ("a", "b")]
    body = script_run(
        [{"toolCalls": calls}, {"text": "ok"}], agent="crm", toolPolicy={"requireApprovalByDefault": True}
    )
    rid = await parked(redis, p, env, body, "awaiting_human")
    assert await p.settle_approval(rid, "c1.1", approved=True, reason="fine") == "recorded"
    before = await stream(redis, rid)
    assert await p.settle_approval(rid, "c1.0", approved=False, reason="not that one", actor=WHO) == "resumed"
    written = await stream(redis, rid)
    assert len(written) == len(before) + 1
    assert (written[-1].kind, written[-1].payload) == (
        "approval", {"toolCallId": "c1.0", "name": "echo", "decision": "rejected", "reason": "not that one", "actor": WHO}
    )  # fmt: skip
    events = await finished(redis, p, env, rid)
    assert after(events, "awaiting_human")[:5] == [
        ("approval", "c1.0"), ("tool_result", "c1.0"), ("error", "c1.0"), ("approval", "c1.1"), ("tool_result", "c1.1")
    ]  # fmt: skip
    assert [e.payload.get("reason") for e in events if e.kind == "approval"] == ["not that one", "fine"]


async def test_a_worker_killed_before_its_first_commit_after_the_answer_writes_it_no_second_time(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    """The approved call (declared sideEffects: false, so its step waits for its result) runs, and its
    worker dies before the commit: the next worker resumes from the parked checkpoint, takes the
    decision up again and leaves the approval out again."""
    with Ledger() as ledger:
        env, p = declared(ledger, tmp_path, redis, redis_url)
        body = {**chaos_run(ONE_CALL), "toolPolicy": {"requireApprovalByDefault": True}}
        rid = await parked(redis, p, env, body, "awaiting_human")
        assert await p.settle_approval(rid, "c1.0", approved=True) == "resumed"
        written = await stream(redis, rid)
        doomed = WorkerProc(
            redis_url,
            env={**env, "AGENTMILL_FAILPOINTS": "after_tool_effect:1", "AGENTMILL_STEP_HOLD_MS": "5000"},
        ).start()
        assert wait_until(lambda: not doomed.alive, 30), "the worker never reached after_tool_effect"
        assert await stream(redis, rid) == written  # it died before writing anything
        events = await finished(redis, p, env, rid)
        assert ledger.counts() == {f"{rid}:c1.0": 2}  # run again, as its declaration allows
    assert [e.kind for e in events].count("approval") == 1
    assert after(events, "awaiting_human")[:2] == [("approval", "c1.0"), ("tool_result", "c1.0")]


async def test_sealed_at_rest_the_answers_event_is_sealed_or_left_to_the_worker(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    """With data keys: a client's result is written with its content sealed as its record holds it;
    a decision with a reason (which the script cannot seal) is left to the worker, which seals it."""
    keys = f"k1:{base64.b64encode(os.urandom(32)).decode()}"
    payload_crypto.install(keys)
    try:
        path = crm(tmp_path / "p.json")
        p = producer_for(redis, redis_url, profiles=path)
        env = {"AGENTMILL_PROFILES": path, "AGENTMILL_DATA_KEYS": keys}
        body = lookup_run()
        rid = await parked(redis, p, env, body, "awaiting_tools")
        await p.post_tool_results(rid, [ClientToolResult(tool_call_id="c1.0", content="qv-secret-77")])
        (_, raw), *_ = await redis.xrevrange(K.events(rid), count=1)
        assert raw[b"kind"] == b"tool_result" and b"qv-secret-77" not in raw[b"payload"]
        assert (await stream(redis, rid))[-1].payload["content"] == "qv-secret-77"  # opened by a reader
        await finished(redis, p, env, rid)

        script = [{"toolCalls": [{"name": "echo", "arguments": {"text": "x"}}]}, {"text": "ok"}]
        body = script_run(script, agent="crm", toolPolicy={"requireApprovalByDefault": True})
        rid = await parked(redis, p, env, body, "awaiting_human")
        before = await stream(redis, rid)
        assert await p.settle_approval(rid, "c1.0", approved=True, reason="qv-secret-78") == "resumed"
        assert await stream(redis, rid) == before and not await redis.hget(K.run(rid), F.ANSWERED)
        events = await finished(redis, p, env, rid)
        assert [e.payload.get("reason") for e in events if e.kind == "approval"] == ["qv-secret-78"]
        raw_stream = b"".join(f[b"payload"] for _, f in await redis.xrange(K.events(rid)))
        assert b"qv-secret-78" not in raw_stream
    finally:
        payload_crypto.install(None)


async def test_while_a_worker_of_an_earlier_release_is_live_the_answers_event_is_left_to_the_worker(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    """A worker that does not know RunField.ANSWERED (its lease key holds '1', as beat.lua wrote it
    before) would write the event again if it took the run up: during such a rolling deploy the
    script writes none."""
    path = crm(tmp_path / "p.json")
    p, env = producer_for(redis, redis_url, profiles=path), {"AGENTMILL_PROFILES": path}
    rid = await parked(redis, p, env, lookup_run(), "awaiting_tools")
    before = await stream(redis, rid)
    # as that release's beat.lua leaves a live worker: its lease key, its entry in workers only
    await redis.set(K.worker_lease("w-old"), "1", px=60_000)
    await redis.zadd(K.workers, {"w-old": 2**52})
    assert not (await beat(parts_of(redis), Scripts(redis), "w-new", 60_000, register=True)).lost
    assert (await p.post_tool_results(rid, [ClientToolResult(tool_call_id="c1.0", content="x")]))[
        0
    ] == "resumed"
    assert await stream(redis, rid) == before and not await redis.hget(K.run(rid), F.ANSWERED)
    await redis.zrem(K.workers, "w-old")  # forgotten, as that release's forget_worker.lua does
    await redis.delete(K.worker_lease("w-old"), K.worker_lease("w-new"))
    events = await finished(redis, p, env, rid)
    assert after(events, "awaiting_tools")[:1] == [("tool_result", "c1.0")]


async def test_an_answers_check_of_the_workers_release_costs_the_same_commands_with_50_live_workers(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    """The check that no live worker is of an earlier release counts two zsets (workers and
    answer_workers, each worker of this release in both): an answer while 50 workers of this release
    are live runs exactly the commands of one while none is (INFO commandstats), and writes its event."""
    path = crm(tmp_path / "p.json")
    p, env = producer_for(redis, redis_url, profiles=path), {"AGENTMILL_PROFILES": path}
    body = lookup_run()
    first, alone, among = await parked_runs(redis, p, env, body, "awaiting_tools", 3)

    async def answered(rid: str) -> dict[str, int]:
        """The commands (calls by name) the answer ran: its own, and those of its script."""
        await redis.config_resetstat()
        assert (await p.post_tool_results(rid, [ClientToolResult(tool_call_id="c1.0", content="x")]))[
            0
        ] == "resumed"
        stats = await redis.info("commandstats")
        assert await redis.hget(K.run(rid), F.ANSWERED)  # the event written: the check passed
        return {name: int(v["calls"]) for name, v in stats.items()}

    await answered(first)  # the producer's first call (its library and context told, once)
    none = await answered(alone)
    for i in range(50):
        assert not (await beat(parts_of(redis), Scripts(redis), f"w{i}", 60_000, register=True)).lost
    assert await redis.zcount(K.workers, 1, "+inf") == 50
    many = await answered(among)
    assert many == none, {
        k: (none.get(k), many.get(k)) for k in set(none) | set(many) if none.get(k) != many.get(k)
    }


async def test_a_beat_removes_the_answer_workers_entries_whose_lease_expired(redis: Redis) -> None:
    """A dead worker forgotten by a reconciler of a release before answer_workers keeps its entry
    there (that release's forget_worker.lua takes it from workers only); the next beat of any
    worker on the partition removes it, and leaves the live ones."""
    scripts, parts = Scripts(redis), parts_of(redis)
    for w in ("w-dead", "w-live"):
        assert not (await beat(parts, scripts, w, 60_000, register=True)).lost
    await redis.zadd(K.answer_workers, {"w-dead": 1})  # its lease expired long ago
    await redis.zrem(K.workers, "w-dead")
    assert not (await beat(parts, scripts, "w-new", 60_000, register=True)).lost
    assert sorted(await redis.zrange(K.answer_workers, 0, -1)) == [b"w-live", b"w-new"]
