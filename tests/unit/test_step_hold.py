"""A model reply whose tool calls are all declared ``sideEffects: false`` waits up to
``AGENTMILL_STEP_HOLD_MS`` for them and goes out in one commit with their results (worker/runner/
commits.py ``hold``). On in-memory ports: what the run wrote is read back from the MemoryRun, and the
store counts its commits."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson

from shared.profiles import AgentProfile, ToolSettings
from shared.settings import Settings
from tests.unit.test_runner import World

PURE = ToolSettings(side_effects=False)
EFFECTS = ToolSettings(side_effects=True)  # echo is declared without side effects unless the profile says so


def profile(**settings: ToolSettings) -> AgentProfile:
    return AgentProfile(name="t", tools=["echo", "sleep"], tool_settings=settings)


def world(script: list[dict[str, Any]], prof: AgentProfile, hold_ms: int = 50) -> World:
    return World(script, profile=prof, settings=Settings(step_hold_ms=hold_ms))


def seqs_clean(w: World) -> bool:
    seqs = [s for s, _, _, _ in w.run.events]
    return seqs == list(range(1, len(seqs) + 1))


def echo_steps(n: int) -> list[dict[str, Any]]:
    return [
        {"toolCalls": [{"id": f"c{i}", "name": "echo", "arguments": {"text": f"t{i}"}}]} for i in range(n)
    ] + [{"text": "done"}]


async def commits_of(
    prof: AgentProfile, script: list[dict[str, Any]], hold_ms: int = 50
) -> tuple[World, int]:
    w = world(script, prof, hold_ms)
    driver, store = w.driver()
    assert await asyncio.wait_for(driver.run(), 10) == "completed"
    return w, store.commits


async def test_a_side_effect_free_tool_step_is_one_commit_with_the_same_events() -> None:
    held, held_commits = await commits_of(profile(echo=PURE), echo_steps(5))
    alone, alone_commits = await commits_of(profile(echo=PURE), echo_steps(5), hold_ms=0)
    undeclared, undeclared_commits = await commits_of(profile(echo=EFFECTS), echo_steps(5))
    assert alone_commits == undeclared_commits
    assert held_commits == alone_commits - 5  # one commit a tool step instead of two
    assert held.run.kinds() == alone.run.kinds() == undeclared.run.kinds()
    assert seqs_clean(held)
    assert [p["content"] for p in held.run.payloads("tool_result")] == [f"t{i}" for i in range(5)]
    assert held.tools.executed == [f"c{i}.0" for i in range(1, 6)]  # each call once
    assert all(r["state"] == "done" for r in held.run.tools.values())
    assert len(held.run.tools) == 5  # every call recorded, no claim left open


async def test_echo_is_held_by_default_and_a_profile_opts_back_in_to_two_commits() -> None:
    """echo declares itself without side effects: a profile with no toolSettings gets the one
    commit a step of the declared tool; ``sideEffects: true`` in the profile wins."""
    _, declared = await commits_of(profile(echo=PURE), echo_steps(3))
    _, default = await commits_of(profile(), echo_steps(3))
    _, timed = await commits_of(profile(echo=ToolSettings(timeout_s=5)), echo_steps(3))
    _, opted = await commits_of(profile(echo=EFFECTS), echo_steps(3))
    assert default == timed == declared == opted - 3


async def test_a_round_of_side_effect_free_calls_is_one_commit_with_all_their_results() -> None:
    calls = [{"id": f"p{i}", "name": "echo", "arguments": {"text": str(i)}} for i in range(4)]
    script = [{"toolCalls": calls}, {"text": "done"}]
    held, held_commits = await commits_of(profile(echo=PURE), script)
    alone, alone_commits = await commits_of(profile(echo=PURE), script, hold_ms=0)
    assert held_commits == alone_commits - 4  # the reply and its four results: one commit
    assert sorted(held.run.kinds()) == sorted(alone.run.kinds())
    assert seqs_clean(held) and len(held.run.tools) == 4


async def test_an_undeclared_call_starts_only_once_its_claim_and_what_was_held_are_written() -> None:
    """A round runs its calls in turn: the side-effect-free one is held with the reply; the next,
    undeclared, is claimed in the commit that writes them, before it runs."""
    script = [{"toolCalls": [{"id": "a", "name": "echo", "arguments": {"text": "x"}},
                             {"id": "b", "name": "sleep", "arguments": {"ms": 1}}]}, {"text": "done"}]  # fmt: skip
    w = world(script, profile(echo=PURE))
    seen: dict[str, tuple[list[str], dict[str, Any]]] = {}
    execute = w.tools.execute

    async def noting(prof: Any, call: Any, ctx: Any, on_retry: Any = None) -> Any:
        seen[call.name] = (w.run.kinds(), {k: dict(v) for k, v in w.run.tools.items()})
        return await execute(prof, call, ctx, on_retry)

    w.tools.execute = noting  # type: ignore[method-assign]
    driver, store = w.driver()
    assert await asyncio.wait_for(driver.run(), 10) == "completed"
    echo_kinds, echo_tools = seen["echo"]
    assert "assistant_message" not in echo_kinds and not echo_tools  # held: nothing written yet
    sleep_kinds, sleep_tools = seen["sleep"]
    assert sleep_kinds.count("tool_result") == 1 and "assistant_message" in sleep_kinds
    assert sleep_tools["c1.0"]["state"] == "done" and sleep_tools["c1.1"]["state"] == "pending"
    _, alone = await commits_of(profile(echo=PURE), script, hold_ms=0)
    assert store.commits == alone - 1


async def test_a_slow_side_effect_free_tool_gets_its_reply_out_when_the_hold_runs_out() -> None:
    """A tailer waits at most the hold for the reply: a call still running then does not keep it."""
    script = [{"toolCalls": [{"id": "s", "name": "sleep", "arguments": {"ms": 400}}]}, {"text": "done"}]
    w = world(script, profile(sleep=PURE), hold_ms=50)
    driver, _ = w.driver()
    task = asyncio.ensure_future(driver.run())
    t0 = time.monotonic()
    while "tool_call" not in w.run.kinds():
        assert time.monotonic() - t0 < 0.3, "the reply waited for the tool past the hold"
        await asyncio.sleep(0.005)
    assert "tool_result" not in w.run.kinds() and w.run.tools["c1.0"]["state"] == "pending"  # claimed
    assert orjson.loads(w.run.checkpoint or b"{}")["seq"] == len(w.run.events)  # with its checkpoint
    assert await asyncio.wait_for(task, 5) == "completed"
    assert w.tools.executed == ["c1.0"] and seqs_clean(w)


async def test_a_worker_lost_during_the_hold_costs_the_reply_and_may_run_the_call_again() -> None:
    """What ``sideEffects: false`` allows: the held reply was never written, so the next worker asks the
    model again and runs the call again. Nothing written is written twice."""
    script = [{"toolCalls": [{"id": "s", "name": "sleep", "arguments": {"ms": 100}}]}, {"text": "done"}]
    w = world(script, profile(sleep=PURE), hold_ms=5_000)
    first, _ = w.driver()
    task = asyncio.ensure_future(first.run())
    t0 = time.monotonic()
    while not w.tools.executed:
        assert time.monotonic() - t0 < 2
        await asyncio.sleep(0.005)
    before = w.run.kinds()
    assert "assistant_message" not in before  # held: the reply is not out
    task.cancel()  # the worker is gone (its hand-back writes nothing it held)
    await asyncio.gather(task, return_exceptions=True)
    assert w.run.kinds() == before
    w.run.owner = ""  # as a lapsed lease leaves it
    again, _ = w.driver()
    assert await asyncio.wait_for(again.run(), 5) == "completed"
    assert w.tools.executed == ["c1.0", "c1.0"]  # run again: allowed by the declaration
    assert seqs_clean(w)
    assert w.run.kinds().count("assistant_message") == 2  # the re-asked reply and the answer
    assert w.run.kinds().count("tool_result") == 1
