"""What a session keeps of its runs' tool calls, through a real worker and Redis, checked against the
runs' own tool records: every call a run executed reaches its session with its true outcome, whether
compaction took it out of the transcript, whether the run completed, failed or was aborted, and
whether its worker ended it or it ended parked, on no worker (an abort, an approval timeout)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Protocol

import orjson
import pytest
from redis.asyncio import Redis

from agentmill_client.models import RunInput, RunResult
from producer.service import Producer
from shared.profiles import AgentProfile
from shared.tool_records import ToolRecord
from tests.integration.helpers import producer_for, running_worker, script_run, stream, until_status, wait_all
from tests.support.schema import K
from worker.adapters.memory_store import (
    MemoryHost,
    MemoryModels,
    MemoryRun,
    MemoryRunStore,
    MemorySessionStore,
    MemoryTools,
)
from worker.models.scripted import ScriptedProvider
from worker.runner import RunDriver, RunPorts

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


def recorded(run_id: str, records: dict[str, ToolRecord]) -> dict[str, tuple[str, bool, str]]:
    """The run's executed calls, from its tool records: session call id -> (content, isError, tool)."""
    out = {}
    for call_id, rec in records.items():
        res = rec.recorded
        if res is not None and res.name not in INTERNAL:
            out[f"{run_id}/{call_id}"] = (res.content, res.is_error, res.name)
    return out


def recall(ids: list[str]) -> dict[str, Any]:
    return {"toolCalls": [{"name": "recall_tool_call", "arguments": {"callIds": ids}}]}


def search(**args: Any) -> dict[str, Any]:
    return {"toolCalls": [{"name": "search_history", "arguments": args}]}


def answers(events: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    """The internal tools' results among a run's events, in order, as JSON."""
    return [orjson.loads(p["content"]) for kind, p in events
            if kind == "tool_result" and p["name"] in ("recall_tool_call", "search_history")]  # fmt: skip


class Pool(Protocol):
    """Where the session's runs run: a real worker on Redis, or the runner on the in-memory store."""

    async def run(self, body: dict[str, Any]) -> RunResult: ...

    async def run_aborted(self, body: dict[str, Any]) -> RunResult:
        """The run, aborted while running once its echo call is done (its worker ends it)."""
        ...

    async def records(self, run_id: str) -> dict[str, ToolRecord]: ...

    async def events(self, run_id: str) -> list[tuple[str, dict[str, Any]]]: ...

    async def loops(self) -> list[dict[str, Any]]:
        """The session's turns, oldest first."""
        ...


class InRedis:
    def __init__(self, redis: Redis, p: Producer) -> None:
        self.redis, self.p = redis, p

    async def run(self, body: dict[str, Any]) -> RunResult:
        sub = await self.p.submit(body)
        return await self._ended(sub.run_id)

    async def _ended(self, run_id: str) -> RunResult:
        rec = (await wait_all(self.p, [run_id], 15))[run_id]
        assert rec.result is not None, rec
        return rec.result

    async def run_aborted(self, body: dict[str, Any]) -> RunResult:
        run_id = (await self.p.submit(body)).run_id
        for _ in range(300):
            if any(k == "tool_result" and e["name"] == "echo" for k, e in await self.events(run_id)):
                break
            await asyncio.sleep(0.02)
        assert await self.p.abort(run_id) == "requested"  # its worker ends it
        return await self._ended(run_id)

    async def records(self, run_id: str) -> dict[str, ToolRecord]:
        return await records_in(self.redis, run_id)

    async def events(self, run_id: str) -> list[tuple[str, dict[str, Any]]]:
        return [(e.kind, e.payload) for e in await stream(self.redis, run_id)]

    async def loops(self) -> list[dict[str, Any]]:
        return [orjson.loads(x) for x in await self.redis.lrange(K.session_loops(SID), 0, -1)]


class InMemory:
    def __init__(self) -> None:
        self.sessions = MemorySessionStore()
        self.host = MemoryHost({"hist": AgentProfile.model_validate(PROFILE)})
        self.runs: dict[str, MemoryRun] = {}

    def _driver(self, body: dict[str, Any]) -> tuple[RunDriver, MemoryRun]:
        run_id = f"run-{len(self.runs) + 1}"
        run = self.runs[run_id] = self.sessions.runs[run_id] = MemoryRun.submitted(
            run_id, RunInput.model_validate(body)
        )
        models = MemoryModels(lambda p: ScriptedProvider(p.provider))
        ports = RunPorts(MemoryRunStore(run, self.sessions), self.sessions, models, MemoryTools())
        return RunDriver(self.host, ports, run_id, gen=1), run

    async def run(self, body: dict[str, Any]) -> RunResult:
        driver, run = self._driver(body)
        await driver.run()
        return RunResult.model_validate_json(run.result)

    async def run_aborted(self, body: dict[str, Any]) -> RunResult:
        driver, run = self._driver(body)
        job = asyncio.ensure_future(driver.run())
        for _ in range(300):
            if any(e["name"] == "echo" for e in run.payloads("tool_result")):
                break
            await asyncio.sleep(0.01)
        driver.request_abort("aborted by request")
        await job
        return RunResult.model_validate_json(run.result)

    async def records(self, run_id: str) -> dict[str, ToolRecord]:
        return {k: ToolRecord.from_dict(v) for k, v in self.runs[run_id].tools.items()}

    async def events(self, run_id: str) -> list[tuple[str, dict[str, Any]]]:
        return [(k, orjson.loads(p)) for _, k, _, p in self.runs[run_id].events]

    async def loops(self) -> list[dict[str, Any]]:
        return [orjson.loads(x) for x in self.sessions.history.get(SID, [])]


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.integration)])
async def pool(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Pool]:
    if request.param == "memory":
        yield InMemory()
        return
    redis_url: str = request.getfixturevalue("redis_url")  # a clean database on the suite's server
    path = tmp_path / "profiles.json"
    path.write_bytes(orjson.dumps({"profiles": [PROFILE]}))
    redis = Redis.from_url(redis_url)
    try:
        async with running_worker(redis_url, profiles=str(path)):
            yield InRedis(redis, producer_for(redis, redis_url, profiles=str(path)))
    finally:
        await redis.aclose()


def check(past: dict[str, tuple[str, bool, str]], got: list[Any]) -> None:
    """A recall of every past call and a search by each tool say what the records say."""
    recalled, *searches = got
    assert {r["callId"]: (r["content"], r["isError"]) for r in recalled["results"]} == {
        i: (content, err) for i, (content, err, _) in past.items()
    }
    for tool, found in zip(("fail", "echo"), searches, strict=True):
        hits = {h["callId"]: h.get("isError", False) for h in found["hits"] if "callId" in h}
        assert hits == {i: err for i, (_, err, name) in past.items() if name == tool}, tool


async def test_every_call_reaches_the_session_with_its_outcome_however_its_run_ended(pool: Pool) -> None:
    """The same four runs on either store: what the session keeps agrees with the runs' records."""
    asking = [search(tool="fail", limit=20), search(tool="echo", limit=20), {"text": "seen"}]
    a = await pool.run(turn([echo("a1"), fail("a2 down"), echo("a3"), echo("a4"), {"text": "A done"}],
                            autoCreateSession=True, includeMessages=True))  # fmt: skip
    b = await pool.run(turn([fail("b1 down"), {"error": {"kind": "invalid", "message": "bad reply"}}]))
    past = {
        **recorded(a.run_id, await pool.records(a.run_id)),
        **recorded(b.run_id, await pool.records(b.run_id)),
    }
    c = await pool.run_aborted(turn([recall(sorted(past)), *asking[:2], echo("c1"), {"stall": True}]))
    everything = {**past, **recorded(c.run_id, await pool.records(c.run_id))}
    d = await pool.run(turn([recall(sorted(everything)), *asking]))
    assert [r.status.value for r in (a, b, c, d)] == ["completed", "failed", "aborted", "completed"]
    assert a.messages is not None
    assert len([m for m in a.messages if m.role == "tool"]) < 4  # compaction took calls out
    assert len(past) == 5 and len(everything) == 6
    assert [err for _, err, name in everything.values() if name == "fail"] == [True, True]
    check(past, answers(await pool.events(c.run_id)))  # the third run knows the first two's calls…
    check(everything, answers(await pool.events(d.run_id)))  # …and a fourth every call of the three
    loops = await pool.loops()
    assert [lp["runId"] for lp in loops] == [a.run_id, d.run_id]  # only completed runs are turns
    assert [c["id"] for c in loops[0]["toolCalls"]] == sorted(
        recorded(a.run_id, await pool.records(a.run_id))
    )


PARKING = {
    **PROFILE, "name": "parking", "tools": ["echo", "fail", "sleep"],
    "toolSettings": {"fail": {"maxTries": 1}, "sleep": {"requiresApproval": True}},
    "clientTools": [{"name": "lookup", "description": "Look it up.", "parameters": {"type": "object"}}],
}  # fmt: skip


@pytest.mark.integration
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
        past = {**await recorded_in(redis, a.run_id), **await recorded_in(redis, b.run_id)}
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
    assert [x["id"] for x in calls] == [*sorted(await recorded_in(redis, a.run_id)), *await recorded_in(redis, b.run_id),
                                        *sorted(await recorded_in(redis, c.run_id))]  # fmt: skip
    assert [x["isError"] for x in calls if x["runId"] != c.run_id] == [False, True, False]
    check(past, answers([(e.kind, e.payload) for e in await stream(redis, c.run_id)]))


async def records_in(redis: Redis, run_id: str) -> dict[str, ToolRecord]:
    return {k.decode(): ToolRecord.from_json(v) for k, v in (await redis.hgetall(K.tools(run_id))).items()}


async def recorded_in(redis: Redis, run_id: str) -> dict[str, tuple[str, bool, str]]:
    return recorded(run_id, await records_in(redis, run_id))
