"""A retry or fork in the pure machine (worker/machine/restore.py): the origin's ending rewound to
where it can go on, recorded tool results served and never executed again, and a state rebuilt from
events equal to the one the machine had at that seq."""

from __future__ import annotations

from typing import Any

import orjson

from agentmill_client.models import EventKind, Message, ToolResult
from agentmill_client.statuses import RunStatus
from tests.unit.machine_driver import T0, calling, calls_reply, config, failure, go, result, text_reply
from worker import machine as m

USER = [Message(role="user", content="hi")]


def restored(origin: m.RunState | None, **kw: Any) -> m.Restored:
    return m.Restored(T0 + 5, config(), origin, USER, **kw)


def executed(cmds: list[m.Command]) -> list[str]:
    return [c.call.id for c in cmds if isinstance(c, m.ExecuteTool)]


def three_rounds_then_fatal() -> m.RunState:
    s = calling()
    for i in (1, 2, 3):
        s, _ = go(s, calls_reply((f"c{i}.0", "echo", "{}")), result(f"c{i}.0", f"r{i}"))
    s, _ = go(s, failure(status=401))
    assert s.phase == RunStatus.FAILED and s.last_error is not None
    return s


def test_a_retry_resumes_a_failed_run_at_its_next_model_call_executing_nothing() -> None:
    origin = three_rounds_then_fatal()
    s, cmds = m.decide(m.initial_state("r2"), restored(origin, lineage={"retryOf": "r1"}))
    assert s.node == m.CALLING and s.run_id == "r2" and not s.terminal
    assert s.transcript == origin.transcript  # the three tool results are in the model's input
    assert executed(cmds) == []
    assert s.last_error is None and s.attempt == 0 and s.started_at_ms == T0 + 5
    assert s.model_call_index == origin.model_call_index + 1  # new call ids: c5.*, never c1.0 again
    first = cmds[0]
    assert isinstance(first, m.Emit) and first.payload == {"status": "running", "agent": "t", "retryOf": "r1"}
    call = next(c for c in cmds if isinstance(c, m.CallModel))
    assert [x.content for x in call.request.messages if x.role == "tool"] == ["r1", "r2", "r3"]
    s, cmds = go(s, text_reply("fine"))
    assert s.phase == RunStatus.COMPLETED


def test_a_retry_of_a_run_that_failed_mid_round_serves_recorded_results_and_runs_the_rest() -> None:
    s, _ = go(calling(), calls_reply(("c1.0", "echo", "{}"), ("c1.1", "calc", "{}"), ("c1.2", "echo", "{}")))
    s, _ = go(s, result("c1.0", "done before"))
    origin, _ = go(s, m.DeadlineReached(T0 + 1))
    assert origin.phase == RunStatus.FAILED and origin.round
    recorded = {"c1.1": ToolResult(tool_call_id="c1.1", name="calc", content="recorded")}
    s, cmds = m.decide(m.initial_state("r2"), restored(origin, recorded=recorded))
    assert s.phase == m.Phase.TOOL_RUNNING
    assert executed(cmds) == ["c1.2"]  # c1.0 had its result in the state, c1.1 a record
    served = [c.payload for c in cmds if isinstance(c, m.Emit) and c.kind == EventKind.TOOL_RESULT]
    assert [p["content"] for p in served] == ["recorded"]
    s, _ = go(s, result("c1.2", "new"))
    assert s.node == m.CALLING
    assert [x.content for x in s.transcript if x.role == "tool"] == ["done before", "recorded", "new"]


def test_pending_approvals_are_asked_again() -> None:
    origin, _ = go(calling(), calls_reply(("c1.0", "danger", "{}")), m.DeadlineReached(T0 + 1))
    s, cmds = m.decide(m.initial_state("r2"), restored(origin))
    assert s.phase == RunStatus.AWAITING_HUMAN
    assert [c.id for c in next(c for c in cmds if isinstance(c, m.AwaitHuman)).pending] == ["c1.0"]


def test_an_origin_that_never_started_starts_from_the_input() -> None:
    rejected, _ = go(m.initial_state("r1"), m.StartRejected(T0, "configuration", "x"))
    for origin in (None, rejected):
        s, _ = m.decide(m.initial_state("r2"), restored(origin))
        assert s.node == m.CALLING and s.transcript == USER and s.model_call_index == 1


def emitted(state: m.RunState, *events: m.Event) -> tuple[m.RunState, list[tuple[str, dict[str, Any]]]]:
    """The events a step publishes, as a reader of the stream gets them (JSON)."""
    out: list[tuple[str, dict[str, Any]]] = []
    for e in events:
        state, cmds = m.decide(state, e)
        out += [(c.kind.value, orjson.loads(orjson.dumps(c.payload))) for c in cmds if isinstance(c, m.Emit)]
    return state, out


def test_rebuild_from_events_gives_the_state_the_machine_had_at_each_step() -> None:
    s, log = emitted(m.initial_state("r1"), m.Started(T0, config(), USER), m.ContextLoaded(T0, []))
    steps: list[tuple[int, m.RunState]] = [(len(log), s)]
    for ev in [
        calls_reply(("c1.0", "echo", '{"a": 1}'), ("c1.1", "calc", "{}")),
        result("c1.1", "second first"),
        result("c1.0", "first"),
        failure(),  # a retried attempt: the scripted model's turn counts failures
        m.RetryTimerFired(T0),
        calls_reply(("c3.0", "echo", "{}")),
        result("c3.0", "three"),
        text_reply("all done"),
    ]:
        s, more = emitted(s, ev)
        log += more
        steps.append((len(log), s))
    for seq, want in steps:
        got = m.rebuild("r9", want, USER, log[:seq])
        assert got.transcript == want.transcript, seq
        assert (got.round, got.results) == (want.round, want.results), seq
        assert (got.iterations, got.failures, got.tool_rounds) == (
            want.iterations,
            want.failures,
            want.tool_rounds,
        )
        # the call in flight at that seq (no reply yet) is asked again, under the same index
        assert want.model_call_index - got.model_call_index in (0, 1)


def test_a_fork_inside_a_round_with_messages_starts_before_the_reply_that_opened_it() -> None:
    s, log = emitted(m.initial_state("r1"), m.Started(T0, config(), USER), m.ContextLoaded(T0, []))
    s, more = emitted(s, calls_reply(("c1.0", "echo", "{}")), result("c1.0", "one"))
    log += more
    s, more = emitted(s, calls_reply(("c2.0", "echo", "{}"), ("c2.1", "echo", "{}")), result("c2.0", "two"))
    log += more
    at = m.rebuild("r2", s, USER, log)
    assert [c.id for c in at.round] == ["c2.0", "c2.1"] and list(at.results) == ["c2.0"]
    late = [Message(role="user", content="and now?")]
    f, cmds = m.decide(m.initial_state("r2"), restored(at, append=late))
    assert f.node == m.CALLING and executed(cmds) == []
    assert [x.role for x in f.transcript] == ["user", "assistant", "tool", "user"]
    assert f.transcript[-1].content == "and now?"
    # Without messages the fork finishes the round: only the call without a result runs.
    f, cmds = m.decide(m.initial_state("r2"), restored(at))
    assert f.phase == m.Phase.TOOL_RUNNING and executed(cmds) == ["c2.1"]
