"""loopLimits.maxToolCalls (a limit from the design documents' CountBot): a default cap on the tool calls a run
executes, after which the run ends as the other loop limits do."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from agentmill_client.models import LoopLimits, RunInput
from agentmill_client.statuses import RunStatus
from shared.profiles import AgentProfile
from tests.unit.machine_driver import Driver, calling, calls_reply, config, go, result, text_reply
from worker import machine as m
from worker.core.config import DEFAULT_MAX_TOOL_CALLS, RECALL_SPEC, resolve_config


def test_the_cap_defaults_to_100_and_a_run_may_only_narrow_it() -> None:
    run = RunInput.model_validate({"inputMessages": [{"role": "user", "content": "x"}]})
    prof = AgentProfile(name="p")
    assert resolve_config(prof, run, {}, has_session=False).max_tool_calls == DEFAULT_MAX_TOOL_CALLS == 100
    narrow = run.model_copy(update={"loop_limits": LoopLimits(max_tool_calls=5)})
    assert resolve_config(prof, narrow, {}, has_session=False).max_tool_calls == 5
    prof7 = AgentProfile(name="p", loop_limits=LoopLimits(max_tool_calls=7))
    wide = run.model_copy(update={"loop_limits": LoopLimits(max_tool_calls=50)})
    assert resolve_config(prof7, wide, {}, has_session=False).max_tool_calls == 7


def test_reaching_the_cap_asks_for_the_answer_without_tools_and_names_the_limit() -> None:
    s, _ = go(
        calling(config(max_tool_calls=3, on_limit="answer")),
        calls_reply(("a", "echo", "{}"), ("b", "calc", "{}")),
    )
    s, _ = go(s, result("a"), result("b"))
    assert s.tool_calls_used == 2 and s.node == m.CALLING and not s.final_call  # one more fits
    s, cmds = go(s, calls_reply(("c", "echo", "{}"), ("d", "echo", "{}")))  # two more would pass it
    assert s.final_call == "max_tool_calls" and s.tool_calls_used == 2
    refused = [c.payload for c in cmds if isinstance(c, m.Emit) and c.kind == "tool_result"]
    assert [r["toolCallId"] for r in refused] == ["c", "d"] and all(r["isError"] for r in refused)
    req = next(c.request for c in cmds if isinstance(c, m.CallModel))
    assert req.tools == []
    s, cmds = go(s, text_reply("what I have"))
    assert s.phase == RunStatus.COMPLETED and m.result_of(s).stop_reason == "max_tool_calls"


def test_a_round_that_reaches_the_cap_exactly_goes_straight_to_the_answer() -> None:
    s, _ = go(
        calling(config(max_tool_calls=2, on_limit="answer")),
        calls_reply(("a", "echo", "{}"), ("b", "calc", "{}")),
    )
    s, cmds = go(s, result("a"), result("b"))
    assert s.final_call == "max_tool_calls" and s.node == m.CALLING
    assert {"status": "limit_reached", "limit": "max_tool_calls", "action": "final_answer"} in [
        c.payload for c in cmds if isinstance(c, m.Emit)
    ]


def test_on_limit_fail_fails_the_run_with_the_limit() -> None:
    s, _ = go(
        calling(config(max_tool_calls=1, on_limit="fail")),
        calls_reply(("a", "echo", "{}"), ("b", "echo", "{}")),
    )
    assert s.phase == RunStatus.FAILED and s.last_error is not None and s.last_error.code == "max_tool_calls"


def test_internal_tools_do_not_count() -> None:
    s, _ = go(calling(config(max_tool_calls=1, internal_tools=[RECALL_SPEC])),
              calls_reply(("a", "recall_tool_call", '{"callId": "x"}'), ("b", "echo", "{}")))  # fmt: skip
    assert s.phase == m.Phase.TOOL_RUNNING and s.tool_calls_used == 1


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["calls", "text", "danger", "remote"]), max_size=30), st.integers(0, 9),
       st.sampled_from(["answer", "fail"]))  # fmt: skip
def test_no_run_executes_more_tool_calls_than_its_cap(model: list[str], cap: int, on_limit: str) -> None:
    cfg = config(max_tool_calls=cap, max_iterations=50, on_limit=on_limit)
    d = Driver(model, ["ok"] * 200)
    s = d.run(m.initial_state("r1").model_copy(update={"config": cfg}), 5_000)
    assert s.terminal and s.tool_calls_used <= cap
    if m.result_of(s).stop_reason == "max_tool_calls":
        assert on_limit == "answer" and s.phase == RunStatus.COMPLETED
