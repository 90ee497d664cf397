"""Sub-agents in the pure machine: a sub-agent call starts a child run (derived id), the round parks in
awaiting_children until every child ended, and the depth limit and cycles are refused as error results."""

from __future__ import annotations

from agentmill_client.statuses import RunStatus
from tests.unit.machine_driver import T0, TASK, calling, calls_reply, child_result, config, go, result
from worker import machine as m


def _children(cmds: list[m.Command]) -> list[m.StartChildren]:
    return [c for c in cmds if isinstance(c, m.StartChildren)]


def test_parallel_sub_agent_calls_start_their_children_at_once_and_park_until_every_one_ended() -> None:
    s, cmds = go(calling(), calls_reply(("c1", "helper", TASK), ("c2", "helper", TASK), ("c3", "echo", "{}")))
    (spawn,) = _children(cmds)
    assert [c.id for c in spawn.calls] == ["c1", "c2"]
    assert spawn.child_ids == {"c1": m.child_run_id("r1", "c1"), "c2": m.child_run_id("r1", "c2")}
    assert s.node == m.Phase.TOOL_RUNNING and s.running == ["c3"]
    s, cmds = go(s, m.ChildrenStarted(T0, {"c1": "k1", "c2": "k2"}))
    started = [c.payload for c in cmds if isinstance(c, m.Emit) and c.kind == "child_started"]
    assert [(p["toolCallId"], p["streamKey"], p["agent"]) for p in started] == [
        ("c1", "k1", "h"),
        ("c2", "k2", "h"),
    ]
    assert s.node == m.Phase.TOOL_RUNNING  # the echo call still runs here
    s, cmds = go(s, result("c3"))
    assert s.node == RunStatus.AWAITING_CHILDREN
    (park,) = [c for c in cmds if isinstance(c, m.AwaitChildren)]
    assert park.record() == [{"toolCallId": "c1", "name": "helper", "runId": spawn.child_ids["c1"]},
                             {"toolCallId": "c2", "name": "helper", "runId": spawn.child_ids["c2"]}]  # fmt: skip
    s, cmds = go(s, m.Resumed(T0), m.ChildrenEnded(T0, {"c2": child_result("c2", "two")}))
    assert s.node == RunStatus.AWAITING_CHILDREN and [
        c.pending[0].id for c in cmds if isinstance(c, m.AwaitChildren)
    ] == ["c1"]
    s, cmds = go(
        s, m.Resumed(T0), m.ChildrenEnded(T0, {"c1": child_result("c1", "failed: x", is_error=True)})
    )
    assert s.node == m.CALLING
    assert [(t.tool_call_id, t.content) for t in s.transcript if t.role == "tool"] == [
        ("c1", "failed: x"), ("c2", "two"), ("c3", "ok")]  # fmt: skip
    ended = [c.payload for c in cmds if isinstance(c, m.Emit) and c.kind == "child_ended"]
    assert ended == [
        {"toolCallId": "c1", "childRunId": spawn.child_ids["c1"], "streamKey": "k1", "isError": True}
    ]
    assert s.children == {} and s.child_streams == {}


def test_a_parent_resumed_while_creating_children_creates_the_same_ones_again() -> None:
    s, cmds = go(calling(), calls_reply(("c1", "helper", TASK)))
    (first,) = _children(cmds)
    s2, cmds2 = go(s, m.Resumed(T0))
    (again,) = _children(cmds2)
    assert again.child_ids == first.child_ids and s2.spawning == ["c1"]


def test_the_depth_limit_refuses_a_child_with_an_error_result() -> None:
    cfg = config(ancestors=["a", "b"], max_depth=2)
    s, cmds = go(calling(cfg), calls_reply(("c1", "helper", TASK)))
    assert not _children(cmds)
    res = s.transcript[-1]
    assert res.role == "tool" and "loopLimits.maxDepth=2 reached" in (res.content or "")
    assert s.node == m.CALLING


def test_a_cycle_is_refused_with_an_error_result() -> None:
    cfg = config(ancestors=["h", "x"])  # "helper" runs agent "h", already an ancestor
    s, cmds = go(calling(cfg), calls_reply(("c1", "helper", TASK)))
    assert not _children(cmds)
    assert "agent 'h' is already in this run's chain (h -> x -> t -> h): a cycle" in (
        s.transcript[-1].content or ""
    )


def test_a_child_that_could_not_be_created_is_an_error_result_and_bad_arguments_start_none() -> None:
    s, cmds = go(calling(), calls_reply(("c1", "helper", TASK), ("c2", "helper", '{"nope": 1}')))
    assert [c.id for c in _children(cmds)[0].calls] == ["c1"]
    s, _ = go(s, m.ChildrenStarted(T0, {}, {"c1": "no profile named 'h'"}))
    assert s.node == m.CALLING
    assert [t.content for t in s.transcript if t.role == "tool"] == [
        "error: no profile named 'h'", "error: invalid arguments: arguments: 'task' is a required property"]  # fmt: skip


def test_the_depth_limit_is_the_roots_and_a_child_profile_may_only_narrow_it() -> None:
    from agentmill_client.models import LoopLimits, RunInput
    from shared.profiles import AgentProfile
    from worker.core.config import Lineage, resolve_config

    def depth(profile: int | None, run: int | None, lineage: Lineage | None) -> int:
        p = AgentProfile(name="x", loop_limits=LoopLimits(max_depth=profile))
        r = RunInput(input_messages=[{"role": "user", "content": "x"}],  # type: ignore[list-item]
                     loop_limits=None if run is None else LoopLimits(max_depth=run))  # fmt: skip
        return resolve_config(p, r, {}, has_session=False, lineage=lineage).max_depth

    assert depth(None, None, None) == 3  # the default
    assert depth(5, None, None) == 5 and depth(5, 2, None) == 2 and depth(None, 1, None) == 1
    assert depth(None, None, Lineage(agents=["a"], max_depth=4)) == 4  # the root's binds the child
    assert (
        depth(2, None, Lineage(agents=["a"], max_depth=4)) == 2 and depth(6, None, Lineage(max_depth=4)) == 4
    )
