"""Sub-agents through real worker processes and Redis: a parked parent frees its slot for its
children, a child whose worker is SIGKILLed resumes and answers its parent exactly once, aborting a
parent aborts its children, and the depth limit and cycles are refused with a clear error result."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from redis.asyncio import Redis

from agentmill_client.models import ClientToolResult
from shared import children
from tests.integration.api_support import A, B, api
from tests.integration.api_support import settings as api_settings
from tests.integration.helpers import (
    assert_clean_stream,
    metric_samples,
    producer_for,
    running_worker,
    stream,
    until_status,
    wait_all,
)
from tests.support.procs import WorkerProc
from tests.support.schema import K
from tests.support.waits import until
from worker.core.preamble import unframe

pytestmark = pytest.mark.integration

FAST = {"AGENTMILL_LEASE_MS": "2000", "AGENTMILL_HEARTBEAT_MS": "300", "AGENTMILL_RECONCILE_MS": "300"}


def profiles(tmp_path: Path, child_sleep_ms: int = 300) -> str:
    """boss delegates to helper (which sleeps, then answers with what it was given), to itself (a cycle)
    and to middle, which delegates to helper in turn."""
    scripted = {"kind": "scripted", "mode": "script"}
    helper = {"name": "helper", "tools": ["sleep"],
              "provider": {**scripted, "script": [
                  {"toolCalls": [{"name": "sleep", "arguments": {"ms": child_sleep_ms}}]}, {"echoContext": True}]}}  # fmt: skip
    middle = {"name": "middle", "agentTools": [{"agent": "helper", "name": "ask_helper"}],
              "provider": {**scripted, "script": [
                  {"toolCalls": [{"name": "ask_helper", "arguments": {"task": "deeper"}}]}, {"text": "middle done"}]}}  # fmt: skip
    lookup = {"name": "lookup", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}
    boss = {"name": "boss", "provider": scripted, "clientTools": [lookup],
            "agentTools": [{"agent": "helper", "name": "ask_helper", "description": "a helper"},
                           {"agent": "boss", "name": "ask_boss"}, {"agent": "middle", "name": "ask_middle"}]}  # fmt: skip
    path = tmp_path / "profiles.json"
    path.write_bytes(orjson.dumps({"profiles": [boss, helper, middle]}))
    return str(path)


def ask(*tasks: str, tool: str = "ask_helper") -> dict[str, Any]:
    return {"toolCalls": [{"name": tool, "arguments": {"task": t}} for t in tasks]}


def boss_run(script: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"agent": "boss", "inputMessages": [{"role": "user", "content": "go"}],
            "runtimeHints": {"script": script}, **extra}  # fmt: skip


def tool_messages(content: str) -> list[tuple[str, str]]:
    seen = orjson.loads(content)
    return [(m["toolCallId"], unframe(m["content"])) for m in seen["messages"] if m["role"] == "tool"]


async def test_three_parallel_children_of_two_parents_on_two_single_slot_workers_complete(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    """Two parents would hold both slots if a parked parent kept its slot: nothing could run then."""
    path = profiles(tmp_path)
    p = producer_for(redis, redis_url, profiles=path)
    env = {"AGENTMILL_PROFILES": path, "AGENTMILL_MAX_JOBS": "1"}
    procs = [WorkerProc(redis_url, env=env, log=tmp_path / f"w{i}.log").start() for i in range(2)]
    try:
        runs = [
            await p.submit(boss_run([ask(f"{n}-a", f"{n}-b", f"{n}-c"), {"echoContext": True}])) for n in "xy"
        ]
        done = await wait_all(p, [r.run_id for r in runs], 60)
    finally:
        for w in procs:
            w.stop()
    for n, r in zip("xy", runs, strict=True):
        rec = done[r.run_id]
        assert rec.status.value == "completed", rec
        results = tool_messages(rec.result.final_assistant_message.content)  # type: ignore[union-attr]
        assert [i for i, _ in results] == ["c1.0", "c1.1", "c1.2"]  # one result per call, in call order
        for (_, content), task in zip(results, (f"{n}-a", f"{n}-b", f"{n}-c"), strict=True):
            told = [m["content"] for m in orjson.loads(content)["messages"] if m["role"] == "user"]
            assert told == [task]  # each child got its own call's task, and answered that call
        events = await stream(redis, r.run_id)
        assert_clean_stream(events)
        started = [e.payload for e in events if e.kind == "child_started"]
        ended = [e.payload for e in events if e.kind == "child_ended"]
        assert len(started) == len(ended) == 3
        assert {s["childRunId"] for s in started} == {e["childRunId"] for e in ended}
        assert all(s["streamKey"] == K.events(s["childRunId"]) for s in started)
        assert [e.payload["status"] for e in events if e.kind == "status"].count("awaiting_children") >= 1
        kids = await children.child_runs(p.parts, "default", r.run_id)
        assert sorted(k["runId"] for k in kids) == sorted(s["childRunId"] for s in started)
        assert {k["status"] for k in kids} == {"completed"}
        for s in started:  # a child knows its parent
            h = await redis.hmget(K.run(s["childRunId"]), ["parentRunId", "parentToolCallId", "handoff"])
            assert h[:2] == [r.run_id.encode(), s["toolCallId"].encode()] and not h[2]


async def test_a_child_whose_worker_is_killed_resumes_and_answers_its_parent_once(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    path = profiles(tmp_path, child_sleep_ms=4000)
    p = producer_for(redis, redis_url, profiles=path)
    env = {"AGENTMILL_PROFILES": path, **FAST}
    first = WorkerProc(redis_url, env=env, log=tmp_path / "a.log").start()
    second: WorkerProc | None = None
    try:
        run = await p.submit(boss_run([ask("one", "two"), {"echoContext": True}]))
        await until_status(redis, run.run_id, "awaiting_children", within=30)
        kids = [e.payload["childRunId"] for e in await stream(redis, run.run_id) if e.kind == "child_started"]
        for k in kids:  # both children are in their sleep on the first worker
            await until_status(redis, k, "running", within=20)
        await asyncio.sleep(0.5)
        first.kill()
        second = WorkerProc(redis_url, env=env, log=tmp_path / "b.log").start()
        done = (await wait_all(p, [run.run_id], 60))[run.run_id]
    finally:
        first.stop()
        if second is not None:
            second.stop()
    assert done.status.value == "completed"
    assert [i for i, _ in tool_messages(done.result.final_assistant_message.content)] == ["c1.0", "c1.1"]  # type: ignore[union-attr]
    for k in kids:
        assert int(await redis.hget(K.run(k), "crashes") or 0) >= 1  # resumed after losing its worker
    events = await stream(redis, run.run_id)
    assert_clean_stream(events)
    for call in ("c1.0", "c1.1"):  # exactly one result per child
        assert sum(1 for e in events if e.kind == "tool_result" and e.payload["toolCallId"] == call) == 1
        assert sum(1 for e in events if e.kind == "child_ended" and e.payload["toolCallId"] == call) == 1


async def _count_status(redis: Redis, run_ids: list[str], status: str, *, at_least: int) -> bool:
    got = [await redis.hget(K.run(r), "status") for r in run_ids]
    return sum(g == status.encode() for g in got) >= at_least


async def test_aborting_a_parent_aborts_every_child(redis: Redis, redis_url: str, tmp_path: Path) -> None:
    path = profiles(tmp_path, child_sleep_ms=30_000)
    p = producer_for(redis, redis_url, profiles=path)
    env = {"AGENTMILL_PROFILES": path, "AGENTMILL_MAX_JOBS": "2", **FAST}
    w = WorkerProc(redis_url, env=env, log=tmp_path / "w.log").start()
    try:
        run = await p.submit(boss_run([ask("a", "b", "c")]))
        await until_status(redis, run.run_id, "awaiting_children", within=30)
        kids = [e.payload["childRunId"] for e in await stream(redis, run.run_id) if e.kind == "child_started"]
        # Two run, the third is queued (which two: the queue's order among jobs of one millisecond).
        await until(
            "two children running",
            lambda: _count_status(redis, kids, "running", at_least=2),
            within=20,
        )
        assert await p.abort(run.run_id) == "aborted"
        recs = await wait_all(p, kids, 30)
    finally:
        w.stop()
    assert {r.status.value for r in recs.values()} == {"aborted"}
    for r in recs.values():
        assert r.result is not None and r.result.last_error is not None
        assert f"its parent run {run.run_id} ended aborted" in r.result.last_error.message
    assert (await p.get(run.run_id)).status.value == "aborted"  # type: ignore[union-attr]


async def test_the_depth_limit_and_a_cycle_are_refused_with_a_clear_error(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    path = profiles(tmp_path, child_sleep_ms=10)
    p = producer_for(redis, redis_url, profiles=path)
    env = {"AGENTMILL_PROFILES": path, **FAST}
    w = WorkerProc(redis_url, env=env, log=tmp_path / "w.log").start()
    try:
        cycle = await p.submit(boss_run([ask("again", tool="ask_boss"), {"echoContext": True}]))
        # boss -> middle -> helper is depth 2: refused at maxDepth 1, allowed at the default 3.
        shallow = await p.submit(boss_run([ask("x", tool="ask_middle"), {"echoContext": True}],
                                          loopLimits={"maxDepth": 1}))  # fmt: skip
        deep = await p.submit(boss_run([ask("x", tool="ask_middle"), {"echoContext": True}]))
        done = await wait_all(p, [cycle.run_id, shallow.run_id, deep.run_id], 60)
    finally:
        w.stop()
    (msg,) = tool_messages(done[cycle.run_id].result.final_assistant_message.content)  # type: ignore[union-attr]
    assert msg[1] == (
        "error: sub-agent refused: agent 'boss' is already in this run's chain (boss -> boss): a cycle"
    )
    assert not await children.child_runs(p.parts, "default", cycle.run_id)  # no child was created
    (msg,) = tool_messages(done[shallow.run_id].result.final_assistant_message.content)  # type: ignore[union-attr]
    assert msg[1] == "middle done"  # middle answered; its own call was refused:
    (mid,) = await children.child_runs(p.parts, "default", shallow.run_id)
    mid_done = (await wait_all(p, [mid["runId"]], 5))[mid["runId"]]
    events = await stream(redis, mid["runId"])
    refused = next(e.payload for e in events if e.kind == "tool_result")
    assert refused["isError"] and "loopLimits.maxDepth=1 reached" in refused["content"]
    assert mid_done.status.value == "completed"
    (msg,) = tool_messages(done[deep.run_id].result.final_assistant_message.content)  # type: ignore[union-attr]
    assert msg[1] == "middle done"
    (mid,) = await children.child_runs(p.parts, "default", deep.run_id)
    (leaf,) = await children.child_runs(p.parts, "default", mid["runId"])
    assert leaf["status"] == "completed"
    assert orjson.loads(await redis.hget(K.run(leaf["runId"]), "ancestry")) == {
        "agents": ["boss", "middle"], "maxDepth": 3, "root": deep.run_id}  # fmt: skip


async def test_the_api_shows_a_parents_children_and_a_childs_parent_within_its_tenant(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    path = profiles(tmp_path, child_sleep_ms=10)
    secret = "a-secret-of-this-deployment"
    async with api(api_settings(redis_url, profiles=path, id_secret=secret)) as url, \
            httpx.AsyncClient(base_url=url) as http, running_worker(redis_url, profiles=path, id_secret=secret) as wp:  # fmt: skip
        counters = ("agentmill_children_started_total", "agentmill_children_ended_total")
        before = metric_samples(wp.metrics.render().decode())
        assert [before[(c, ())] for c in counters] == [0, 0]  # there from the start
        r = await http.post(
            "/v1/runs", headers=A, json=boss_run([ask("look"), {"echoContext": True}], runId="mine")
        )
        assert r.status_code == 202, r.text
        r = await http.get("/v1/runs/mine/wait", headers=A, params={"timeout": 30})
        assert r.json()["status"] == "completed", r.text
        view = (await http.get("/v1/runs/mine", headers=A)).json()
        (kid,) = view["children"]
        assert kid["status"] == "completed" and kid["parentToolCallId"] == "c1.0"
        child = (await http.get(f"/v1/runs/{kid['runId']}", headers=A)).json()
        assert child["parentToolCallId"] == "c1.0" and child["status"] == "completed"
        assert child["parentRunId"] == "mine"  # the id the tenant knows, not the key it is kept under
        assert (await http.get(f"/v1/runs/{child['parentRunId']}", headers=A)).json()["status"] == "completed"
        listed = (await http.get("/v1/runs", headers=A, params={"parentRunId": child["parentRunId"]})).json()
        assert [x["runId"] for x in listed["runs"]] == [kid["runId"]]
        assert (await http.get(f"/v1/runs/{kid['runId']}", headers=B)).status_code == 404  # another tenant's
        assert (await http.get("/v1/runs", headers=B, params={"parentRunId": "mine"})).json()["runs"] == []
        after = metric_samples(wp.metrics.render().decode())
        assert [after[(c, ())] for c in counters] == [1, 1]


async def test_a_child_ended_from_outside_reaches_its_parked_parent_through_the_reconciler(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    """A queued child aborted by the API ends in a script on its own partition: its result reaches
    the parent through its ending's mark, delivered by a worker's reconciler sweep."""
    path = profiles(tmp_path, child_sleep_ms=3000)
    p = producer_for(redis, redis_url, profiles=path)
    env = {"AGENTMILL_PROFILES": path, "AGENTMILL_MAX_JOBS": "1", **FAST}
    w = WorkerProc(redis_url, env=env, log=tmp_path / "w.log").start()
    try:
        run = await p.submit(boss_run([ask("first", "second"), {"echoContext": True}]))
        await until_status(redis, run.run_id, "awaiting_children", within=30)
        kids = {e.payload["toolCallId"]: e.payload["childRunId"]
                for e in await stream(redis, run.run_id) if e.kind == "child_started"}  # fmt: skip
        running = await until_one_running(redis, list(kids.values()))
        queued = next(k for k in kids.values() if k != running)
        assert await redis.hget(K.run(queued), "status") == b"queued"  # the one slot is taken
        assert await p.abort(queued, reason="not needed") == "aborted"
        done = (await wait_all(p, [run.run_id], 60))[run.run_id]
    finally:
        w.stop()
    assert done.status.value == "completed"
    results = dict(tool_messages(done.result.final_assistant_message.content))  # type: ignore[union-attr]
    call = next(c for c, k in kids.items() if k == queued)
    assert results[call] == f"error: the child run {queued} ended aborted: aborted: not needed"
    other = next(c for c in kids if c != call)
    assert [m["content"] for m in orjson.loads(results[other])["messages"] if m["role"] == "user"] == [
        "first" if other == "c1.0" else "second"]  # fmt: skip
    events = await stream(redis, run.run_id)
    assert_clean_stream(events)
    assert sorted(e.payload["toolCallId"] for e in events if e.kind == "tool_result") == sorted(kids)
    assert any(e.kind == "error" and e.payload["code"] == "child_failed" for e in events)
    assert not await redis.hget(K.run(queued), "handoff")  # delivered, and the mark cleared
    assert await redis.zscore(K.live, queued) is None


async def until_one_running(redis: Redis, ids: list[str], within: float = 20.0) -> str:
    deadline = asyncio.get_running_loop().time() + within
    while asyncio.get_running_loop().time() < deadline:
        for i in ids:
            if await redis.hget(K.run(i), "status") == b"running":
                return i
        await asyncio.sleep(0.05)
    raise AssertionError(f"none of {ids} ran within {within} s")


async def test_a_childs_result_is_recorded_once_and_resumes_its_parent_once(
    redis: Redis, redis_url: str
) -> None:
    """child_result.lua against a parked parent: the last open child resumes it, a repeat is a no-op."""
    from shared.scripts import Scripts

    scripts = Scripts(redis)
    part = K
    children_json = orjson.dumps(
        [{"toolCallId": "c1.0", "runId": "kid-a"}, {"toolCallId": "c1.1", "runId": "kid-b"}]
    )
    await redis.hset(K.run("dad"), mapping={"status": "awaiting_children", "gen": 1, "tenant": "default",
                                            "owner": "", "children": children_json, "createdAt": 1})  # fmt: skip

    async def deliver(call: str, kid: str, content: str) -> str:
        rec = orjson.dumps({"state": "done", "child": kid,
                            "result": {"toolCallId": call, "name": "", "content": content, "isError": False}})  # fmt: skip
        k, a = scripts.frame(part, [part.run("dad"), part.tools("dad")], ["dad", call, kid, rec])
        return (await scripts.child_result(keys=k, args=a))[0].decode()  # type: ignore[no-any-return]

    assert await deliver("c1.0", "kid-a", "A") == "recorded"
    assert await redis.hget(K.run("dad"), "status") == b"awaiting_children"
    assert await deliver("c1.0", "kid-a", "A again") == "duplicate"
    assert await deliver("c1.1", "kid-b", "B") == "resumed"
    assert (await redis.hmget(K.run("dad"), ["status", "gen"])) == [b"queued", b"2"]
    assert await deliver("c1.1", "kid-b", "B") == "duplicate"  # the parent is queued: nothing again
    assert await redis.hget(K.run("dad"), "gen") == b"2"
    assert orjson.loads(await redis.hget(K.tools("dad"), "c1.0"))["result"]["content"] == "A"  # type: ignore[arg-type]


async def test_a_child_created_after_its_parent_ended_is_aborted_when_it_starts(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    """The creation of a child may land after its parent's ending passed an abort on to its
    children (an abort while the parent was creating them): the child aborts itself at its start."""
    from shared.partitions import Partitions
    from shared.scripts import Scripts

    path = profiles(tmp_path, child_sleep_ms=10)
    p = producer_for(redis, redis_url, profiles=path)
    dad = await p.submit(boss_run([{"stall": True}]))
    assert await p.abort(dad.run_id) == "aborted"  # queued: it ends at once
    spec = children.ChildSpec("c1.0", "sub_late", "helper", "too late")
    made = await children.spawn(Partitions.of_client(redis, 1), Scripts(redis), parent_id=dad.run_id,
                                tenant="default", lineage=b'{"agents": ["boss"], "maxDepth": 3}', specs=[spec])  # fmt: skip
    assert made["c1.0"].created
    async with running_worker(redis_url, profiles=path):
        late = (await wait_all(p, ["sub_late"], 20))["sub_late"]
    assert late.status.value == "aborted"
    assert late.result is not None and late.result.last_error is not None
    assert late.result.last_error.message == f"its parent run {dad.run_id} ended aborted"
    events = await stream(redis, "sub_late")
    assert not any(e.kind == "assistant_message" for e in events)  # it did nothing


async def test_a_round_of_a_client_call_and_a_child_waits_for_both(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    """The child ends while its parent waits for the client: its result waits in the tools hash; the
    client's result resumes the parent, which parks for its children and is put back at once."""
    path = profiles(tmp_path, child_sleep_ms=10)
    p = producer_for(redis, redis_url, profiles=path)
    mixed = {"toolCalls": [{"name": "lookup", "arguments": {"q": "ACME"}},
                           {"name": "ask_helper", "arguments": {"task": "meanwhile"}}]}  # fmt: skip
    async with running_worker(redis_url, profiles=path, reconcile_ms=200):
        run = await p.submit(boss_run([mixed, {"echoContext": True}]))
        await until_status(redis, run.run_id, "awaiting_tools", within=20)
        (kid,) = [
            e.payload["childRunId"] for e in await stream(redis, run.run_id) if e.kind == "child_started"
        ]
        await wait_all(p, [kid], 20)
        rec = await until_recorded(redis, run.run_id, "c1.1")
        assert rec["child"] == kid and (await redis.hget(K.run(run.run_id), "status")) == b"awaiting_tools"
        verdict, _, _ = await p.post_tool_results(
            run.run_id, [ClientToolResult(tool_call_id="c1.0", content="ACME: 12 open orders")]
        )
        assert verdict == "resumed"
        done = (await wait_all(p, [run.run_id], 30))[run.run_id]
    assert done.status.value == "completed"
    results = tool_messages(done.result.final_assistant_message.content)  # type: ignore[union-attr]
    assert results[0] == ("c1.0", "ACME: 12 open orders") and results[1][0] == "c1.1"
    assert [m["content"] for m in orjson.loads(results[1][1])["messages"] if m["role"] == "user"] == [
        "meanwhile"
    ]
    statuses = [e.payload["status"] for e in await stream(redis, run.run_id) if e.kind == "status"]
    assert statuses.index("awaiting_tools") < statuses.index("awaiting_children")


async def until_recorded(redis: Redis, run_id: str, call: str, within: float = 20.0) -> dict[str, Any]:
    deadline = asyncio.get_running_loop().time() + within
    while asyncio.get_running_loop().time() < deadline:
        raw = await redis.hget(K.tools(run_id), call)
        if raw and orjson.loads(raw).get("state") == "done":
            return dict(orjson.loads(raw))
        await asyncio.sleep(0.05)
    raise AssertionError(f"no result recorded for {run_id}/{call} within {within} s")
