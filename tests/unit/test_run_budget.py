"""Run budgets in the pure machine: a run affords a model call only when what it spent plus the
call's worst case (prompt estimate + maxTokens) stays within RunInput.budget (narrowed by the
profile's); else it ends budget_exceeded before the call, never with a tool call in flight."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from agentmill_client.models import Budget, Message, ToolCall, ToolResult, Usage
from agentmill_client.statuses import RunStatus
from shared.profiles import Pricing
from tests.unit.machine_driver import T0, calling, config, go, result, text_reply
from worker import machine as m
from worker.core import policy
from worker.core.config import narrow_budget


def test_a_run_can_only_narrow_its_profiles_budget() -> None:
    prof = Budget(max_tokens=1_000, max_cost_usd=0.5)
    assert narrow_budget(prof, Budget(max_tokens=5_000)) == Budget(max_tokens=1_000, max_cost_usd=0.5)
    assert narrow_budget(prof, Budget(max_tokens=10, max_cost_usd=2.0)) == Budget(
        max_tokens=10, max_cost_usd=0.5
    )
    assert narrow_budget(Budget(), Budget(max_cost_usd=0.1)) == Budget(max_cost_usd=0.1)
    assert narrow_budget(Budget(), None) is None


def test_the_call_that_would_cross_max_tokens_is_never_made() -> None:
    cfg = config(budget=Budget(max_tokens=250), reserve_output_tokens=100)
    s = calling(cfg)
    first = s.model_call_index
    # the first call's worst case fits (prompt ~ a few tokens + 100); it spends 150 (tool round)
    reply = m.ModelReplied(
        T0,
        Message(role="assistant", content="", tool_calls=[ToolCall(id="c1", name="echo", arguments="{}")]),
        Usage(input_tokens=100, output_tokens=50),
    )
    s, cmds = go(s, reply)
    assert s.phase == m.Phase.TOOL_RUNNING and any(isinstance(c, m.ExecuteTool) for c in cmds)
    s, cmds = go(s, result(s.round[0].id))
    assert s.phase == RunStatus.FAILED and s.model_call_index == first  # no second call
    assert not any(isinstance(c, m.CallModel) for c in cmds)
    err = s.last_error
    assert err is not None and err.code == "budget_exceeded"
    assert "spent 150" in err.message and "maxTokens=250" in err.message and "> 250" in err.message
    assert m.result_of(s).usage == Usage(input_tokens=100, output_tokens=50)


def test_max_cost_usd_counts_the_calls_worst_cost_by_the_pricing() -> None:
    pricing = Pricing(input_per_m_tok=1_000_000.0, output_per_m_tok=1_000_000.0)  # $1 a token
    cfg = config(budget=Budget(max_cost_usd=45.0), reserve_output_tokens=40, pricing=pricing)
    s, cmds = go(
        m.initial_state("r1"),
        m.Started(T0, cfg, [Message(role="user", content="hi")]),
        m.ContextLoaded(T0, []),
    )
    assert s.phase == RunStatus.FAILED and s.last_error is not None
    assert s.last_error.code == "budget_exceeded" and "maxCostUsd=45.0" in s.last_error.message
    cheap = cfg.model_copy(update={"reserve_output_tokens": 10})
    s, cmds = go(
        m.initial_state("r1"),
        m.Started(T0, cheap, [Message(role="user", content="hi")]),
        m.ContextLoaded(T0, []),
    )
    req = next(c.request for c in cmds if isinstance(c, m.CallModel))
    assert s.node == m.CALLING and req.reserve_cost_usd == req.reserve_tokens  # $1 a token


def test_a_tenant_refusal_ends_the_run_before_its_call() -> None:
    s = calling(config())
    s, cmds = go(s, m.BudgetRefused(T0, "tenant budget: spent 90, reserved 5, this call 20 > 100"))
    assert s.phase == RunStatus.FAILED and s.last_error is not None
    assert s.last_error.code == "budget_exceeded" and "spent 90" in s.last_error.message
    assert isinstance(cmds[-1], m.Finish) and cmds[-1].result.last_error == s.last_error


@settings(max_examples=200, deadline=None)
@given(
    limit=st.integers(50, 3_000),
    out_max=st.integers(1, 400),
    steps=st.lists(st.tuples(st.booleans(), st.floats(0, 1), st.floats(0, 1)), min_size=1, max_size=30),
)
def test_a_run_never_spends_past_its_budget(
    limit: int, out_max: int, steps: list[tuple[bool, float, float]]
) -> None:
    """Whatever the replies (each within its call's reservation), the run's usage stays within
    maxTokens, and it ends either completed or budget_exceeded with no tool call running."""
    big = config().compaction.model_copy(update={"max_messages": 1_000, "max_estimated_tokens": 10**6})
    cfg = config(
        budget=Budget(max_tokens=limit), reserve_output_tokens=out_max, max_iterations=100, compaction=big
    )
    s, cmds = go(
        m.initial_state("r1"),
        m.Started(T0, cfg, [Message(role="user", content="hi")]),
        m.ContextLoaded(T0, []),
    )
    i = 0
    while not s.terminal:
        call = next(c for c in cmds if isinstance(c, m.CallModel))
        req = call.request
        prompt = policy.estimate_tokens(req.messages)
        assert req.reserve_tokens == policy.prompt_bound(req.messages) + out_max  # the day budget's hold
        tools, fin, fout = steps[i % len(steps)] if i < 60 else (False, 0.0, 0.0)
        i += 1
        usage = Usage(input_tokens=int(prompt * fin), output_tokens=int(out_max * fout))
        if tools:
            msg = Message(
                role="assistant", content="", tool_calls=[ToolCall(id=f"c{i}", name="echo", arguments="{}")]
            )
        else:
            msg = Message(role="assistant", content="done")
        s, cmds = m.decide(s, m.ModelReplied(T0, msg, usage))
        while s.phase == m.Phase.TOOL_RUNNING:
            run = next(c for c in cmds if isinstance(c, m.ExecuteTool))
            s, cmds = m.decide(
                s, m.ToolFinished(T0, ToolResult(tool_call_id=run.call.id, name="echo", content="x"))
            )
    assert s.usage.input_tokens + s.usage.output_tokens <= limit
    assert s.running == []
    if s.phase == RunStatus.FAILED:
        assert s.last_error is not None and s.last_error.code == "budget_exceeded"
    else:
        assert s.phase == RunStatus.COMPLETED


def test_without_a_budget_nothing_changes() -> None:
    s, _ = go(calling(config()), text_reply())
    assert s.phase == RunStatus.COMPLETED


def test_a_cost_budget_on_a_model_with_no_price_ends_the_run_before_its_first_call() -> None:
    cfg = config(budget=Budget(max_cost_usd=1.0), pricing=None)
    s, cmds = go(
        m.initial_state("r1"),
        m.Started(T0, cfg, [Message(role="user", content="hi")]),
        m.ContextLoaded(T0, []),
    )
    assert s.phase == RunStatus.FAILED and not any(isinstance(c, m.CallModel) for c in cmds)
    assert s.last_error is not None and s.last_error.code == "unpriced_model"
    assert "has no price" in s.last_error.message
