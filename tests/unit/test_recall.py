"""Recall as a property: past tool results never reach the model input, yet every one of them is
reachable through recall_tool_call; the window stays within its bounds and is built deterministically.

Fast unit test on fakeredis: a finished run's session update is stored the way the commit script
stores it (RPUSH the run loop, HSET the tool results), then the next run's model input is built with
the worker's own load_history + build_messages.
"""

from __future__ import annotations

import asyncio
import functools
import ssl
import time

import fakeredis
import httpx
import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from agentmill_client.models import Message, RunResult, RunStatus, ToolCall, ToolResult
from shared import netguard
from shared.profiles import AgentProfile, ContextConfig, profiles_from
from shared.settings import Settings
from shared.tool_records import ToolRecord
from tests.support.schema import K, parts_of
from worker.core.config import RECALL_TOOL, RunConfig
from worker.core.context import MAX_NOTE_CHARS, TRUNCATED
from worker.core.sessions import session_update
from worker.machine import RunState, build_messages
from worker.process.deps import WorkerDeps

SID = "s-prop"
words = st.text(alphabet="abcdefgh ", min_size=0, max_size=700)


@st.composite
def past_runs(draw: st.DrawFn) -> list[tuple[str, list[str], str]]:
    """(user text, tool result contents, final reply) per past run; results carry unique markers."""
    runs = []
    for i in range(draw(st.integers(0, 14))):
        results = [f"RESULT-{i}-{j}:" + draw(words) for j in range(draw(st.integers(0, 3)))]
        runs.append((draw(words), results, draw(words)))
    return runs


def finished_state(
    i: int, user: str, results: list[str], reply: str, started_at_ms: int
) -> tuple[RunState, RunResult, dict[str, ToolRecord]]:
    # agentmill's ids: the same in every run (model call 1, position j); the session tells them apart
    calls = [ToolCall(id=f"c1.{j}", name="echo", arguments="{}") for j in range(len(results))]
    transcript = [Message(role="user", content=user)]
    if calls:
        transcript.append(Message(role="assistant", content="", tool_calls=calls))
        transcript += [
            Message(role="tool", content=r, tool_call_id=c.id, name=c.name)
            for c, r in zip(calls, results, strict=True)
        ]
    final = Message(role="assistant", content=reply)
    state = RunState(
        run_id=f"run{i}", session_id=SID, transcript=[*transcript, final], started_at_ms=started_at_ms
    )
    result = RunResult(
        run_id=f"run{i}", session_id=SID, status=RunStatus.COMPLETED, final_assistant_message=final
    )
    records = {
        c.id: ToolRecord.finished(1, 1, ToolResult(tool_call_id=c.id, name=c.name, content=r), started_at_ms)
        for c, r in zip(calls, results, strict=True)
    }
    return state, result, records


@functools.cache
def _made_once() -> tuple[Settings, dict[str, AgentProfile], ssl.SSLContext]:
    """What every example's worker is built from, made once: the settings and profiles read from the
    environment, and a TLS context (loading the CA file is about 50 ms, twice an example otherwise:
    the test's HTTP client and the worker's guarded one). No example connects anywhere."""
    return Settings(), profiles_from(None), ssl.create_default_context()


async def check(runs: list[tuple[str, list[str], str]], cfg: ContextConfig) -> None:
    redis = fakeredis.aioredis.FakeRedis()
    settings_, profiles, tls = _made_once()
    async with httpx.AsyncClient(verify=tls) as http, netguard.guarded_client(tls=tls) as guarded:
        deps = WorkerDeps(
            parts=parts_of(redis), settings=settings_, profiles=profiles, http=http, worker_id="t",
            guarded_http=guarded,
        )  # fmt: skip
        now = int(time.time() * 1000)
        for i, (user, results, reply) in enumerate(runs):  # one a minute, the last a minute ago
            update = session_update(
                *finished_state(i, user, results, reply, now - (len(runs) - i) * 60_000), now_ms=now
            )
            assert update is not None and update.loop
            await redis.rpush(K.session_loops(SID), update.loop)
            for call_id, raw in update.tool_results:
                await redis.hset(K.session_results(SID), call_id, raw)

        async def model_input() -> bytes:
            history = await deps.sessions.load_history(SID, cfg)
            state = RunState(
                run_id="now", session_id=SID, history=history,
                config=RunConfig(agent="a", system_prompt="sys"),
                transcript=[Message(role="user", content="and now?")],
            )  # fmt: skip
            return orjson.dumps([m.model_dump(mode="json") for m in build_messages(state)])

        first = await model_input()
        assert first == await model_input()  # deterministic, byte for byte
        messages = orjson.loads(first)
        past = messages[1:-1]
        assert len(past) == 2 * min(len(runs), cfg.max_run_loops)  # user + reply of the newest loops
        note = MAX_NOTE_CHARS + 1  # the line naming a past turn's tool calls by id
        assert all(len(m["content"]) <= cfg.max_message_length + len(TRUNCATED) + note for m in past)
        assert all(m["role"] in ("user", "assistant") and not m.get("tool_calls") for m in past)
        assert b"RESULT-" not in first  # no past tool result reaches the model…
        kept = range(len(runs) - min(len(runs), cfg.max_run_loops), len(runs))
        for i in kept:  # …but the ids of the kept turns' calls do, so the model can ask for them
            assert all(f"run{i}/c1.{j} echo".encode() in first for j in range(len(runs[i][1])))
        for i, (_, results, _) in enumerate(runs):
            for j, content in enumerate(results):
                ask = ToolCall(
                    id="q", name=RECALL_TOOL, arguments=orjson.dumps({"callId": f"run{i}/c1.{j}"}).decode()
                )
                got = await deps.sessions.recall(SID, ask)
                assert not got.is_error and got.content == content  # …but every one is recallable
        missing = await deps.sessions.recall(
            SID, ToolCall(id="q", name=RECALL_TOOL, arguments='{"callId": "nope"}')
        )
        assert missing.is_error
    await redis.aclose()


@settings(max_examples=60, deadline=None)
@given(past_runs(), st.integers(0, 5), st.integers(1, 300))
def test_past_tool_results_stay_out_of_the_model_input_but_are_recallable(
    runs: list[tuple[str, list[str], str]], max_loops: int, max_len: int
) -> None:
    asyncio.run(check(runs, ContextConfig(max_run_loops=max_loops, max_message_length=max_len)))


async def test_without_a_session_recall_reads_the_runs_own_calls_and_the_prompt_names_it() -> None:
    from agentmill_client.models import RunInput
    from shared.profiles import AgentProfile
    from worker.core.config import RECALL_PROMPT, ToolSpec, resolve_config

    run = RunInput.model_validate({"inputMessages": [{"role": "user", "content": "x"}]})
    cfg = resolve_config(AgentProfile(name="p", tools=["calculator"]), run,
                         {"calculator": ToolSpec(name="calculator")}, has_session=False)  # fmt: skip
    assert [t.name for t in cfg.internal_tools] == [RECALL_TOOL] and cfg.system_prompt.endswith(RECALL_PROMPT)
    bare = resolve_config(AgentProfile(name="p"), run, {}, has_session=False)
    assert bare.internal_tools == [] and RECALL_TOOL not in bare.system_prompt  # nothing to recall

    redis = fakeredis.aioredis.FakeRedis()
    async with httpx.AsyncClient() as http:
        deps = WorkerDeps(
            parts=parts_of(redis), settings=Settings(), profiles=profiles_from(None), http=http, worker_id="t"
        )
        record = {"state": "done", "result": {"toolCallId": "own-1", "name": "calculator", "content": "42"}}
        await redis.hset(K.tools("run-a"), "own-1", orjson.dumps(record))
        await redis.hset(K.tools("run-a"), "half", orjson.dumps({"state": "pending", "attempts": 1}))
        ask = ToolCall(id="q", name=RECALL_TOOL, arguments='{"callId": "own-1"}')
        got = await deps.sessions.recall(None, ask, "run-a")
        assert (got.content, got.is_error, got.tool_call_id) == ("42", False, "q")
        unfinished = await deps.sessions.recall(
            None, ToolCall(id="q", name=RECALL_TOOL, arguments='{"callId": "half"}'), "run-a"
        )
        assert unfinished.is_error
        assert (
            await deps.sessions.recall(None, ask, "run-b")
        ).is_error  # another run's calls are not this run's
    await redis.aclose()
