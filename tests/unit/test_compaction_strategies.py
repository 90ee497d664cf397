"""Compaction strategies per profile: keyFacts asks the model for a documented
structure; importance keeps errors, approvals, user corrections and each tool's latest result over
older messages within its budget, tool rounds whole."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from agentmill_client.models import Message, RunInput, ToolCall
from shared.profiles import AgentProfile, CompactionConfig
from worker.adapters.memory_store import (
    MemoryHost,
    MemoryModels,
    MemoryRun,
    MemoryRunStore,
    MemorySessionStore,
    MemoryTools,
)
from worker.core import policy
from worker.core.compaction import (
    KEY_FACTS_PROMPT,
    SUMMARY_PROMPT,
    by_importance,
    summary_prompt,
    without_model,
)
from worker.core.preamble import PREAMBLE_V1, with_preamble
from worker.machine import ModelRequest
from worker.models.base import Chunk
from worker.models.scripted import ScriptedProvider
from worker.runner import RunDriver, RunPorts

N = 0


def rnd(name: str, result: str, text: str = "") -> list[Message]:
    global N
    N += 1
    cid = f"c{N}.0"
    return [Message(role="assistant", content=text, tool_calls=[ToolCall(id=cid, name=name)]),
            Message(role="tool", content=result, tool_call_id=cid, name=name)]  # fmt: skip


def user(text: str) -> list[Message]:
    return [Message(role="user", content=text)]


def test_the_strategy_defaults_follow_use_model_and_pick_the_prompt() -> None:
    assert summary_prompt(CompactionConfig()) is None
    assert summary_prompt(CompactionConfig(use_model=True)) == SUMMARY_PROMPT
    assert summary_prompt(CompactionConfig(strategy="keyFacts")) == KEY_FACTS_PROMPT
    assert summary_prompt(CompactionConfig(strategy="importance", use_model=True)) is None
    for heading in ("DECISIONS:", "IDENTIFIERS:", "NUMBERS:", "OPEN QUESTIONS:"):
        assert heading in KEY_FACTS_PROMPT


def test_importance_keeps_what_matters_and_summarises_the_rest() -> None:
    old_echo, calc_err, approved = (
        rnd("echo", "old echo"),
        rnd("calc", "error: division by zero"),
        rnd("danger", "deleted"),
    )
    chatter = [Message(role="assistant", content="let me think")]
    correction = user("no, use metric units")
    new_echo, weather, tail = rnd("echo", "new echo"), rnd("weather", "-3 C"), rnd("echo", "newest echo")
    transcript = [
        *user("the task"),
        *old_echo,
        *calc_err,
        *approved,
        *chatter,
        *correction,
        *new_echo,
        *weather,
        *tail,
    ]
    new, removed = by_importance(transcript, keep_recent=2, budget_tokens=10_000, approval_tools=["danger"])
    assert removed == 5  # the old echo round, the chatter, and the echo round the tail's echo outdates
    assert new[0].content == "the task" and "5 earlier messages were compacted" in new[1].content
    assert "old echo" in new[1].content and "let me think" in new[1].content  # summarised, ids kept
    assert new[2:] == [*calc_err, *approved, *correction, *weather, *tail]
    tight, removed = by_importance(
        transcript, 2, budget_tokens=policy.estimate_tokens(weather), approval_tools=["danger"]
    )
    assert tight[2:] == [*weather, *tail]  # the newest important unit first, within the budget


def test_importance_with_nothing_to_drop_changes_nothing() -> None:
    t = [*user("task"), *rnd("calc", "error: x"), *rnd("echo", "a"), *rnd("weather", "b")]
    assert by_importance(t, 2, 10_000) == (t, 0)
    cfg = CompactionConfig(strategy="importance", importance_budget_tokens=10_000)
    assert without_model(t, 2, cfg, [], "threshold") == (t, 0)
    new, removed = without_model(t, 2, cfg, [], "overflow")  # the provider refused it: truncate
    assert removed == 4 and len(new) == 4


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["echo", "calc", "danger", "user", "say"]), st.booleans()), max_size=25),
       st.integers(1, 6), st.integers(0, 400))  # fmt: skip
def test_importance_keeps_tool_rounds_whole_and_stays_within_its_budget(
    steps: list[tuple[str, bool]], keep_recent: int, budget: int
) -> None:
    t = user("task")
    for what, failed in steps:
        if what == "user":
            t += user("correction")
        elif what == "say":
            t.append(Message(role="assistant", content="thinking"))
        else:
            t += rnd(what, "error: no" if failed else "fine " * 20)
    new, removed = by_importance(t, keep_recent, budget, ["danger"])
    if removed == 0:
        assert new == t
        return
    assert len(new) == len(t) - removed + 1 and new[0] == t[0]
    offered: set[str] = set()
    for m in new:  # every tool result follows the assistant message that called it
        if m.role == "assistant":
            offered = {c.id for c in m.tool_calls or ()}
        elif m.role == "tool":
            assert m.tool_call_id in offered
    tail_start = len(t) - keep_recent
    while t[tail_start].role == "tool":
        tail_start -= 1
    kept_middle = new[2 : len(new) - (len(t) - tail_start)]
    assert policy.estimate_tokens(kept_middle) <= budget


class Recording(ScriptedProvider):
    """The scripted model, keeping the instructions of every summary request."""

    asked: list[str] = []

    async def stream(self, request: ModelRequest, hints: dict[str, Any]) -> AsyncGenerator[Chunk, None]:
        if request.purpose == "summary":
            Recording.asked.append(request.messages[0].content)
        async for ch in super().stream(request, hints):
            yield ch


async def test_a_key_facts_profile_asks_the_model_for_the_documented_structure() -> None:
    script = [{"toolCalls": [{"name": "echo", "arguments": {"text": f"r{i}"}}]} for i in range(4)] + [
        {"echoContext": True}
    ]
    run_input = RunInput.model_validate({"agent": "k", "runtimeHints": {"script": script},
                                         "inputMessages": [{"role": "user", "content": "go"}]})  # fmt: skip
    run = MemoryRun.submitted("run-k", run_input)
    prof = AgentProfile(
        name="k",
        tools=["echo"],
        compaction=CompactionConfig(max_messages=6, keep_recent=2, strategy="keyFacts"),
    )
    sessions = MemorySessionStore()
    models = MemoryModels(lambda p: Recording(p.provider))
    ports = RunPorts(MemoryRunStore(run, sessions), sessions, models, MemoryTools())
    Recording.asked = []
    assert await RunDriver(MemoryHost({"k": prof}), ports, "run-k", gen=1).run() == "completed"
    assert Recording.asked and all(a == with_preamble(PREAMBLE_V1, KEY_FACTS_PROMPT) for a in Recording.asked)
    assert run.payloads("compaction")
