"""What a session keeps of its runs' tool calls, through a real worker and Redis, checked against the
runs' own tool records: every call a run executed reaches its session with its true outcome, whether
compaction took it out of the transcript, whether the run completed, failed or was aborted, and
whether its worker ended it or it ended parked, on no worker (an abort, an approval timeout)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson
import pytest
from redis.asyncio import Redis

from shared.tool_records import ToolRecord
from tests.integration.helpers import producer_for, running_worker, script_run, stream, until_status, wait_all
from tests.support.schema import K

pytestmark = pytest.mark.integration

SID = "s-calls"
INTERNAL = {"recall_tool_call", "search_history", "load_older_history"}  # not the session's calls
PROFILE = {
    "name": "hist", "provider": {"kind": "scripted", "mode": "script"}, "tools": ["echo", "fail"],
    "toolSettings": {"fail": {"maxTries": 1}},
    "compaction": {"maxMessages": 6, "keepRecent": 2},
    "context": {"maxRunLoops": 5, "historyTools": True},
}  # fmt: skip


def echo(text: str) -> dict[str, Any]:
    return {"toolCalls": [{"name": "echo", "arguments": {"text": text}}]}


def fail(message: str) -> dict[str, Any]:
    return {"toolCalls": [{"name": "fail", "arguments": {"message": message}}]}


def turn(script: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return script_run(script, sessionId=SID, **{"agent": "hist", **extra})


async def recorded(redis: Redis, run_id: str) -> dict[str, tuple[str, bool, str]]:
    """The run's executed calls, from its tool records: session call id -> (content, isError, tool)."""
    out = {}
    for call_id, raw in (await redis.hgetall(K.tools(run_id))).items():
        res = ToolRecord.from_json(raw).recorded
        if res is not None and res.name not in INTERNAL:
            out[f"{run_id}/{call_id.decode()}"] = (res.content, res.is_error, res.name)
    return out


def recall(ids: list[str]) -> dict[str, Any]:
    return {"toolCalls": [{"name": "recall_tool_call", "arguments": {"callIds": ids}}]}


def search(**args: Any) -> dict[str, Any]:
    return {"toolCalls": [{"name": "search_history", "arguments": args}]}


async def answers(redis: Redis, run_id: str) -> list[Any]:
    """The internal tools' results in the run's stream, in order, as JSON."""
    return [orjson.loads(e.payload["content"]) for e in await stream(redis, run_id)
            if e.kind == "tool_result" and e.payload["name"] in ("recall_tool_call", "search_history")]  # fmt: skip


def check(past: dict[str, tuple[str, bool, str]], got: list[Any]) -> None:
    """A recall of every past call and a search by each tool say what the records say."""
    recalled, *searches = got
    assert {r["callId"]: (r["content"], r["isError"]) for r in recalled["results"]} == {
        i: (content, err) for i, (content, err, _) in past.items()
    }
    for tool, found in zip(("fail", "echo"), searches, strict=True):
        hits = {h["callId"]: h.get("isError", False) for h in found["hits"] if "callId" in h}
        assert hits == {i: err for i, (_, err, name) in past.items() if name == tool}, tool


async def test_every_call_reaches_the_session_with_its_outcome_however_its_run_ended(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    path = tmp_path / "profiles.json"
    path.write_bytes(orjson.dumps({"profiles": [PROFILE]}))
    p = producer_for(redis, redis_url, profiles=str(path))
    asking = [search(tool="fail", limit=20), search(tool="echo", limit=20), {"text": "seen"}]
    async with running_worker(redis_url, profiles=str(path)):
        a = await p.submit(turn([echo("a1"), fail("a2 down"), echo("a3"), echo("a4"), {"text": "A done"}],
                                autoCreateSession=True, includeMessages=True))  # fmt: skip
        rec_a = (await wait_all(p, [a.run_id], 15))[a.run_id]
        b = await p.submit(turn([fail("b1 down"), {"error": {"kind": "invalid", "message": "bad reply"}}]))
        rec_b = (await wait_all(p, [b.run_id], 15))[b.run_id]
        past = {**await recorded(redis, a.run_id), **await recorded(redis, b.run_id)}
        c = await p.submit(turn([recall(sorted(past)), *asking[:2], echo("c1"), {"stall": True}]))
        for _ in range(300):  # the run is aborted once its echo call is done
            if any(
                e.kind == "tool_result" and e.payload["name"] == "echo" for e in await stream(redis, c.run_id)
            ):
                break
            await asyncio.sleep(0.02)
        assert await p.abort(c.run_id) == "requested"  # its worker ends it
        rec_c = (await wait_all(p, [c.run_id], 15))[c.run_id]
        everything = {**past, **await recorded(redis, c.run_id)}
        d = await p.submit(turn([recall(sorted(everything)), *asking]))
        rec_d = (await wait_all(p, [d.run_id], 15))[d.run_id]
    statuses = [r.status.value for r in (rec_a, rec_b, rec_c, rec_d)]
    assert statuses == ["completed", "failed", "aborted", "completed"]
    assert rec_a.result is not None and rec_a.result.messages is not None
    assert len([m for m in rec_a.result.messages if m.role == "tool"]) < 4  # compaction took calls out
    assert len(past) == 5 and len(everything) == 6
    assert [err for _, err, name in everything.values() if name == "fail"] == [True, True]
    check(past, await answers(redis, c.run_id))  # the third run knows the first two's calls…
    check(everything, await answers(redis, d.run_id))  # …and a fourth every call of the three
    loops = [orjson.loads(x) for x in await redis.lrange(K.session_loops(SID), 0, -1)]
    assert [lp["runId"] for lp in loops] == [a.run_id, d.run_id]  # only completed runs are turns
    assert [c["id"] for c in loops[0]["toolCalls"]] == sorted(await recorded(redis, a.run_id))


PARKING = {
    **PROFILE, "name": "parking", "tools": ["echo", "fail", "sleep"],
    "toolSettings": {"fail": {"maxTries": 1}, "sleep": {"requiresApproval": True}},
    "clientTools": [{"name": "lookup", "description": "Look it up.", "parameters": {"type": "object"}}],
}  # fmt: skip


async def test_a_run_ended_while_parked_leaves_its_calls_to_the_next_run_of_its_session(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    """A run parked for a client's result and aborted through the producer, and one parked for an
    approval that never came, end on no worker: the calls they made before they parked reach the
    session all the same, once, with their outcome."""
    path = tmp_path / "profiles.json"
    path.write_bytes(orjson.dumps({"profiles": [PARKING]}))
    p = producer_for(redis, redis_url, profiles=str(path))
    lookup = {"toolCalls": [{"name": "lookup", "arguments": {"q": "x"}}]}
    gated = {"toolCalls": [{"name": "sleep", "arguments": {"ms": 1}}]}
    async with running_worker(redis_url, profiles=str(path), reconcile_ms=200):
        a = await p.submit(turn([echo("a1"), fail("a2 down"), lookup, {"text": "never"}], agent="parking",
                                autoCreateSession=True))  # fmt: skip
        await until_status(redis, a.run_id, "awaiting_tools", within=15)
        assert await p.abort(a.run_id, reason="no answer coming") == "aborted"
        assert await p.abort(a.run_id) == "finished"
        b = await p.submit(turn([echo("b1"), gated, {"text": "never"}], agent="parking",
                                toolPolicy={"approvalTimeoutMs": 300}))  # fmt: skip
        rec_b = (await wait_all(p, [b.run_id], 15))[b.run_id]
        past = {**await recorded(redis, a.run_id), **await recorded(redis, b.run_id)}
        c = await p.submit(turn([recall(sorted(past)), search(tool="fail", limit=20), search(tool="echo", limit=20),
                                 {"text": "seen"}], agent="parking"))  # fmt: skip
        rec_c = (await wait_all(p, [c.run_id], 15))[c.run_id]
    rec_a = await p.get(a.run_id)
    assert rec_a is not None and rec_a.status.value == "aborted"
    assert rec_b.status.value == "failed" and rec_b.result is not None and rec_b.result.last_error is not None
    assert rec_b.result.last_error.code == "approval_timeout"
    assert rec_c.status.value == "completed"
    # the parked calls never ran: the session has the three that did, each once, in order
    assert {name for _, _, name in past.values()} == {"echo", "fail"} and len(past) == 3
    calls = [orjson.loads(x) for x in await redis.lrange(K.session_calls(SID), 0, -1)]
    assert [x["id"] for x in calls] == [*sorted(await recorded(redis, a.run_id)), *await recorded(redis, b.run_id),
                                        *sorted(await recorded(redis, c.run_id))]  # fmt: skip
    assert [x["isError"] for x in calls if x["runId"] != c.run_id] == [False, True, False]
    check(past, await answers(redis, c.run_id))
