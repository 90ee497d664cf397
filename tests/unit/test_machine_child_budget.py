"""A child's usage counts against its parent's budget in the pure machine: each child starts with what
the parent's budget has left (the children of one round share it), the children's usage (delivered with their results) is counted once, and
the parent's next model call is refused with budget_exceeded when its children spent the budget."""

from __future__ import annotations

from agentmill_client.models import Budget, Message, RunResult, RunStatus, ToolCall, Usage
from shared.children import result_record
from shared.prices import Pricing
from shared.tool_records import ToolRecord
from tests.unit.machine_driver import T0, TASK, calling, child_result, config, go
from worker import machine as m


def _spawn(cmds: list[m.Command]) -> m.StartChildren:
    (spawn,) = [c for c in cmds if isinstance(c, m.StartChildren)]
    return spawn


def _reply(usage: Usage, *calls: str) -> m.ModelReplied:
    tcs = [ToolCall(id=c, name="helper", arguments=TASK) for c in calls]
    return m.ModelReplied(T0, Message(role="assistant", content="", tool_calls=tcs), usage)


def test_the_children_of_a_round_share_the_parents_remainder() -> None:
    priced = Pricing(input_per_m_tok=1.0, output_per_m_tok=1.0)  # a cost budget needs a priced model
    cfg = config(budget=Budget(max_tokens=1_000, max_cost_usd=2.0), reserve_output_tokens=50, pricing=priced)
    _, cmds = go(calling(cfg), _reply(Usage(input_tokens=300, output_tokens=100, cost_usd=0.5), "c1"))
    assert _spawn(cmds).budget == Budget(max_tokens=600, max_cost_usd=1.5)  # one child: all that is left
    _, cmds = go(calling(cfg), _reply(Usage(input_tokens=300, output_tokens=100, cost_usd=0.5), "c1", "c2"))
    assert _spawn(cmds).budget == Budget(max_tokens=300, max_cost_usd=0.75)  # two: half each
    s, cmds = go(
        calling(cfg), _reply(Usage(input_tokens=300, output_tokens=100), *(f"c{i}" for i in range(7)))
    )
    b = _spawn(cmds).budget
    assert b is not None and b.max_tokens == 85 and b.max_tokens * 7 <= 600  # rounded down: never more
    # a round resumed while its children were being created divides the remainder the same way
    s, cmds = go(s, m.Resumed(T0))
    assert _spawn(cmds).budget == b
    assert _spawn(go(calling(config()), _reply(Usage(input_tokens=1), "c1"))[1]).budget is None


def test_the_children_usage_is_counted_once_and_refuses_the_parents_next_call() -> None:
    cfg = config(budget=Budget(max_tokens=1_000), reserve_output_tokens=50)
    s, cmds = go(calling(cfg), _reply(Usage(input_tokens=100, output_tokens=20), "c1", "c2"))
    s, _ = go(s, m.ChildrenStarted(T0, {"c1": "k1", "c2": "k2"}))
    one = Usage(input_tokens=300, output_tokens=100)
    s, _ = go(s, m.Resumed(T0), m.ChildrenEnded(T0, {"c1": child_result("c1")}, {"c1": one}))
    assert s.node == RunStatus.AWAITING_CHILDREN and s.children_usage == one
    # c1 delivered again with c2: counted once; 120 + 400 + 450 + the next call's ~60 > 1000
    two = Usage(input_tokens=400, output_tokens=50)
    s, cmds = go(s, m.Resumed(T0), m.ChildrenEnded(T0, {"c1": child_result("c1"), "c2": child_result("c2")},
                                                   {"c1": one, "c2": two}))  # fmt: skip
    assert s.phase == RunStatus.FAILED and not any(isinstance(c, m.CallModel) for c in cmds)
    assert s.last_error is not None and s.last_error.code == "budget_exceeded"
    assert "spent 970 tokens" in s.last_error.message
    res = m.result_of(s)
    assert res.usage == Usage(input_tokens=100, output_tokens=20)  # its own calls only
    assert res.children_usage == Usage(input_tokens=700, output_tokens=150)


def test_children_within_the_budget_let_the_parent_call_again_and_later_children_get_less() -> None:
    cfg = config(budget=Budget(max_tokens=1_000), reserve_output_tokens=50)
    s, _ = go(calling(cfg), _reply(Usage(input_tokens=100), "c1"))
    s, _ = go(s, m.ChildrenStarted(T0, {"c1": "k1"}))
    s, cmds = go(
        s, m.Resumed(T0), m.ChildrenEnded(T0, {"c1": child_result("c1")}, {"c1": Usage(output_tokens=200)})
    )
    assert s.node == m.CALLING and any(isinstance(c, m.CallModel) for c in cmds)
    s, cmds = go(s, _reply(Usage(input_tokens=150), "c2"))
    assert _spawn(cmds).budget == Budget(max_tokens=550)  # 1000 - 100 - 200 (child) - 150


def test_a_childs_record_carries_its_usage_with_its_own_childrens() -> None:
    res = RunResult(run_id="k", status=RunStatus.FAILED, usage=Usage(input_tokens=5, output_tokens=1),
                    children_usage=Usage(input_tokens=10, output_tokens=2))  # fmt: skip
    rec = ToolRecord.from_json(result_record("k", "c1", "failed", res))
    assert rec.usage == Usage(input_tokens=15, output_tokens=3) and rec.recorded is not None
    assert ToolRecord.from_json(rec.to_json()) == rec
    assert ToolRecord.from_json(result_record("k", "c1", "aborted", None)).usage is None
