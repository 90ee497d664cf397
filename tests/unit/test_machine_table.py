"""Every legal transition of TRANSITIONS is exercised; every illegal (node, event) pair raises."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from agentmill_client.models import Message
from agentmill_client.statuses import RunStatus
from tests.unit.machine_driver import (
    T0,
    TASK,
    calling,
    calls_reply,
    child_result,
    config,
    failure,
    go,
    in_node,
    result,
    started,
    text_reply,
)
from worker import machine as m

NON_TERMINAL = sorted(m.TRANSITIONS)


def restored(origin: m.RunState | None, **kw: object) -> m.Restored:
    return m.Restored(T0, config(), origin, [Message(role="user", content="hi")], **kw)  # type: ignore[arg-type]


def restore_origins() -> list[m.RunState | None]:
    """Origins a retry resumes from, one per node ``Restored`` may lead to."""
    failed = go(calling(), failure(status=401))[0]
    return [
        None,  # calling
        failed.model_copy(update={"iterations": 10_000}),  # past maxIterations, onLimit fail: failed
        in_node(m.Phase.TOOL_RUNNING),
        in_node(RunStatus.AWAITING_HUMAN),
        in_node(RunStatus.AWAITING_TOOLS),
        failed.model_copy(update={"transcript": [Message(role="user", content="u")] * 40}),  # compacting
    ]


def events_for(node: str) -> list[tuple[m.Event, m.RunState]]:
    """Events (with the state to apply them to) that cover each legal target of each event type."""
    s = in_node(node)
    cases: list[tuple[m.Event, m.RunState]] = [(m.AbortRequested(T0, "stop"), s), (m.DeadlineReached(T0), s),
                                           (m.EffectCrashed(T0, "boom"), s)]  # fmt: skip
    if node in m.RESUMABLE:
        cases.append((m.Resumed(T0), s))
    if node == m.Phase.IDLE:
        cases.append((m.Started(T0, config(), [Message(role="user", content="hi")]), s))
        cases.append((m.StartRejected(T0, "configuration", "no such profile"), s))
        cases += [(restored(origin), s) for origin in restore_origins()]
    if node == m.Phase.PREPARING:
        cases += [
            (m.ContextLoaded(T0, []), s),
            (
                m.ContextLoaded(T0, []),
                started(
                    config(compaction=config().compaction.model_copy(update={"max_messages": 4}))
                ).model_copy(update={"transcript": [Message(role="user", content="u")] * 5}),
            ),
            (m.ContextLoaded(T0 + 10_000, []), started(config(max_run_duration_ms=5))),
        ]
    if node in (m.CALLING, m.STREAMING):
        limited = in_node(node).model_copy(update={"config": config(max_iterations=1, max_tool_rounds=0)})
        small = in_node(node).model_copy(
            update={"config": config(compaction=config().compaction.model_copy(update={"max_messages": 4}))}
        )
        cases += [
            (text_reply(), s),
            (calls_reply(("c1", "echo", "{}")), s),
            (calls_reply(("c1", "danger", "{}")), s),
            (calls_reply(("c1", "remote", "{}")), s),
            (calls_reply(("c1", "nope", "{}")), s),
            (
                calls_reply(("c1", "nope", "{}")),
                in_node(node).model_copy(update={"config": config(max_iterations=1)}),
            ),
            (
                calls_reply(("c1", "nope", "{}")),
                small.model_copy(update={"transcript": [Message(role="user", content="u")] * 5}),
            ),
            (calls_reply(("c1", "echo", "{}")), limited),
            (failure(), s),
            (m.ModelReplied(T0, Message(role="assistant", content="cut"), finish_reason=None), s),
            (failure(kind="overflow", status=None), s),
            (  # past turns shown and nothing left to compact: the window narrows, the model is asked again
                failure(kind="overflow", status=None),
                s.model_copy(
                    update={
                        "history": [Message(role="user", content="old")],
                        "context_window_size": 1,
                        "overflow_retries": 9,
                    }
                ),
            ),
            (failure(status=401), s),
        ]
    if node == m.CALLING:
        cases.append((m.ModelStreamOpened(T0), s))
        cases.append((m.ModelDeferred(T0, "r1:0", None), s))
        cases.append(
            (m.BudgetRefused(T0, "tenant-a's tokensPerDay: spent 90, reserved 0, this call 20 > 100"), s)
        )
    if node == m.RETRYING:
        cases += [
            (m.RetryTimerFired(T0), s),
            (m.RetryTimerFired(T0 + 10_000), s.model_copy(update={"config": config(max_run_duration_ms=5)})),
        ]
    if node == m.Phase.TOOL_RUNNING:
        two = go(calling(), calls_reply(("c1", "echo", "{}"), ("c2", "echo", "{}"), ("c3", "echo", "{}")))[0]
        mixed = go(calling(), calls_reply(("c1", "echo", "{}"), ("c2", "remote", "{}")))[0]
        served = m.Resumed(T0, {"c1": result("c1", "recorded").result})  # a recorded result is served
        cases += [
            (served, s),
            (served, two),
            (served, mixed),
            (served, s.model_copy(update={"config": config(max_iterations=1)})),
            (
                served,
                s.model_copy(
                    update={
                        "config": config(
                            compaction=config().compaction.model_copy(update={"max_messages": 4})
                        ),
                        "transcript": [Message(role="user", content="u")] * 5,
                    }
                ),
            ),
        ]
        cases += [
            (result("c1"), s),
            (result("c1"), two),
            (result("c1"), mixed),
            (result("c1"), s.model_copy(update={"config": config(max_iterations=1)})),
            (
                result("c1"),
                s.model_copy(
                    update={
                        "config": config(
                            compaction=config().compaction.model_copy(update={"max_messages": 4})
                        ),
                        "transcript": [Message(role="user", content="u")] * 5,
                    }
                ),
            ),
        ]
    if node == RunStatus.AWAITING_HUMAN:
        both = go(calling(), calls_reply(("c1", "danger", "{}"), ("c2", "echo", "{}")))[0]
        cases += [
            (m.ApprovalsDecided(T0, {"c1": True}), s),
            (m.ApprovalsDecided(T0, {"c1": False}), s),
            (
                m.ApprovalsDecided(T0, {"c1": False}),
                s.model_copy(update={"config": config(max_iterations=1)}),
            ),
            (
                m.ApprovalsDecided(T0, {"c1": False}),
                s.model_copy(
                    update={
                        "config": config(
                            compaction=config().compaction.model_copy(update={"max_messages": 4})
                        ),
                        "transcript": [Message(role="user", content="u")] * 5,
                    }
                ),
            ),
            (m.ApprovalsDecided(T0, {"c1": True}), both),
            (
                m.ApprovalsDecided(T0, {"c1": True}),
                s.model_copy(update={"config": config(client_tools=["danger"])}),
            ),
        ]
    if node == RunStatus.AWAITING_TOOLS:
        two = go(calling(), calls_reply(("c1", "remote", "{}"), ("c2", "remote", "{}")))[0]
        got = result("c1", "from the client", "remote").result
        cases += [
            (m.ClientResultsReceived(T0, {"c1": got}), s),
            (m.ClientResultsReceived(T0, {"c1": got}), two),
            (m.ClientResultsReceived(T0, {}), s),
            (
                m.ClientResultsReceived(T0, {"c1": got}),
                s.model_copy(update={"config": config(max_iterations=1)}),
            ),
            (
                m.ClientResultsReceived(T0, {"c1": got}),
                s.model_copy(
                    update={
                        "config": config(
                            compaction=config().compaction.model_copy(update={"max_messages": 4})
                        ),
                        "transcript": [Message(role="user", content="u")] * 5,
                    }
                ),
            ),
        ]
    if node == m.Phase.TOOL_RUNNING:
        spawning = go(calling(), calls_reply(("c1", "helper", TASK), ("c2", "echo", "{}")))[0]
        only = go(calling(), calls_reply(("c1", "helper", TASK)))[0]
        cases += [
            (m.ChildrenStarted(T0, {"c1": "k"}), spawning),
            (m.ChildrenStarted(T0, {"c1": "k"}), only),
            (m.ChildrenStarted(T0, {}, {"c1": "no such profile"}), only),
            (
                m.ChildrenStarted(T0, {}, {"c1": "no"}),
                only.model_copy(update={"config": config(max_iterations=1)}),
            ),
            (
                m.ChildrenStarted(T0, {}, {"c1": "no"}),
                only.model_copy(
                    update={
                        "config": config(
                            compaction=config().compaction.model_copy(update={"max_messages": 4})
                        ),
                        "transcript": [Message(role="user", content="u")] * 5,
                    }
                ),
            ),
            (m.Resumed(T0), only),
            (
                m.ChildrenStarted(T0, {"c1": "k"}),
                go(calling(), calls_reply(("c1", "helper", TASK), ("c2", "remote", "{}")))[0],
            ),
            (result("c2"), go(spawning, m.ChildrenStarted(T0, {"c1": "k"}))[0]),
            (m.Resumed(T0, {"c2": result("c2").result}), go(spawning, m.ChildrenStarted(T0, {"c1": "k"}))[0]),
        ]
    if node == RunStatus.AWAITING_CHILDREN:
        two = go(calling(), calls_reply(("c1", "helper", TASK), ("c2", "helper", TASK)),
                 m.ChildrenStarted(T0, {"c1": "k1", "c2": "k2"}))[0]  # fmt: skip
        cases += [
            (m.ChildrenEnded(T0, {"c1": child_result("c1")}), s),
            (m.ChildrenEnded(T0, {"c1": child_result("c1")}), two),
            (m.ChildrenEnded(T0, {}), s),
            (
                m.ChildrenEnded(T0, {"c1": child_result("c1")}),
                s.model_copy(update={"config": config(max_iterations=1)}),
            ),
            (
                m.ChildrenEnded(T0, {"c1": child_result("c1")}),
                s.model_copy(
                    update={
                        "config": config(
                            compaction=config().compaction.model_copy(update={"max_messages": 4})
                        ),
                        "transcript": [Message(role="user", content="u")] * 5,
                    }
                ),
            ),
        ]
    if node == RunStatus.AWAITING_TOOLS:
        both = go(
            calling(),
            calls_reply(("c1", "remote", "{}"), ("c2", "helper", TASK)),
            m.ChildrenStarted(T0, {"c2": "k"}),
        )[0]
        cases.append(
            (m.ClientResultsReceived(T0, {"c1": result("c1", "from the client", "remote").result}), both)
        )
    if node == m.Phase.COMPACTING:
        cases += [
            (m.CompactionDone(T0, s.transcript, 0, "overflow"), s),
            (
                m.CompactionDone(T0 + 10_000, s.transcript, 0, "overflow"),
                s.model_copy(update={"config": config(max_run_duration_ms=5)}),
            ),
        ]
    return cases


@pytest.mark.parametrize("node", NON_TERMINAL)
def test_every_legal_transition_lands_in_the_table(node: str) -> None:
    reached: dict[type, set[str]] = {}
    for ev, s in events_for(node):
        assert s.node == node
        new, _ = m.decide(s, ev)
        assert new.node in m.TRANSITIONS[node][type(ev)]
        reached.setdefault(type(ev), set()).add(new.node)
    for ev_type, targets in m.TRANSITIONS[node].items():
        assert reached.get(ev_type) == set(targets), (
            f"{node} --{ev_type.__name__}--> missing {set(targets) - reached.get(ev_type, set())}"
        )


SAMPLE_EVENTS: list[m.Event] = [
    m.Started(T0, config(), [Message(role="user", content="x")]), m.ContextLoaded(T0, []), m.Resumed(T0),
    m.ModelStreamOpened(T0), text_reply(), failure(), m.RetryTimerFired(T0), result("c1"),
    m.ApprovalsDecided(T0, {}), m.CompactionDone(T0, [], 0, "x"), m.AbortRequested(T0), m.DeadlineReached(T0),
    m.ClientResultsReceived(T0, {}), m.StartRejected(T0, "configuration", "x"), restored(None),
    m.BudgetRefused(T0, "x"), m.ModelDeferred(T0, "r1:0", None),
]  # fmt: skip


@pytest.mark.parametrize(("node", "event"), [
    (n, e) for n, e in itertools.product(NON_TERMINAL, SAMPLE_EVENTS) if type(e) not in m.TRANSITIONS[n]
])  # fmt: skip
def test_illegal_pairs_raise(node: str, event: m.Event) -> None:
    with pytest.raises(m.IllegalTransition):
        m.decide(in_node(node), event)


@pytest.mark.parametrize("event", SAMPLE_EVENTS)
def test_terminal_states_absorb_every_event(event: m.Event) -> None:
    for end in (
        go(calling(), text_reply())[0],
        go(calling(), failure(status=401))[0],
        go(calling(), m.AbortRequested(T0))[0],
    ):
        assert end.terminal
        assert m.decide(end, event) == (end, [])


def test_retries_back_off_and_then_fail_naming_the_cause() -> None:
    s, cmds = go(calling(), failure())
    retry = next(c for c in cmds if isinstance(c, m.Emit) and c.kind == "status")
    assert retry.payload == {
        "status": "retrying",
        "attempt": 1,
        "delayMs": 1000,
        "reason": "http_503",
        "message": "boom",
    }
    s, cmds = go(s, m.RetryTimerFired(T0), failure())
    assert [c.delay_ms for c in cmds if isinstance(c, m.Wait)] == [2000]
    s, cmds = go(s, m.RetryTimerFired(T0), failure())
    assert s.phase == RunStatus.FAILED and s.last_error is not None
    assert (
        s.last_error.code == "model_retries_exhausted"
        and "http_503" in s.last_error.message
        and s.last_error.retryable
    )


def test_partial_failure_discards_and_fatal_fails_at_once() -> None:
    s, cmds = go(calling(), m.ModelStreamOpened(T0), failure(partial=True))
    assert any(isinstance(c, m.Emit) and c.payload.get("status") == "model_call_discarded" for c in cmds)
    s, _ = go(calling(), failure(status=401))
    assert s.phase == RunStatus.FAILED and s.last_error.code == "model_http_401"  # type: ignore[union-attr]


def test_tool_policy_max_parallel_max_calls_and_bad_calls() -> None:
    s = calling(config(max_parallel=2, max_calls_per_run=3))
    s, cmds = go(
        s,
        calls_reply(
            ("a", "echo", "{}"),
            ("b", "echo", "{}"),
            ("c", "echo", "{}"),
            ("d", "echo", "{}"),
            ("e", "nope", "{}"),
            ("f", "echo", "[1]"),
        ),
    )
    assert [c.call.id for c in cmds if isinstance(c, m.ExecuteTool)] == ["a", "b"]  # maxParallel = 2
    errors = {
        e.payload["toolCallId"]: e.payload["content"]
        for e in cmds
        if isinstance(e, m.Emit) and e.kind == "tool_result"
    }
    assert (
        "maxCallsPerRun=3" in errors["d"] and "not available" in errors["e"] and "JSON object" in errors["f"]
    )
    s, cmds = go(s, result("a"))
    assert [c.call.id for c in cmds if isinstance(c, m.ExecuteTool)] == ["c"]
    s, cmds = go(s, result("b"), result("c"))
    assert s.node == m.CALLING and [x.role for x in s.transcript][-6:] == ["tool"] * 6


def test_loop_limits_name_the_limit() -> None:
    s, _ = go(
        calling(config(max_iterations=2)),
        calls_reply(("a", "echo", "{}")),
        result("a"),
        calls_reply(("b", "echo", "{}")),
        result("b"),
    )
    assert s.last_error is not None and s.last_error.code == "max_iterations"
    s, _ = go(
        calling(config(max_tool_rounds=1)),
        calls_reply(("a", "echo", "{}")),
        result("a"),
        calls_reply(("b", "echo", "{}")),
    )
    assert s.last_error is not None and s.last_error.code == "max_tool_rounds"
    s, cmds = go(calling(config(max_run_duration_ms=100)), m.DeadlineReached(T0 + 100))
    assert s.last_error is not None and s.last_error.code == "max_run_duration"
    assert (
        isinstance(cmds[-2], m.Emit)
        and cmds[-2].payload["status"] == "failed"
        and isinstance(cmds[-1], m.Finish)
    )


def test_the_readme_diagram_is_drawn_from_the_table() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "state-machine.md").read_text()
    assert "```mermaid\n" + m.mermaid() + "\n```" in doc, (
        "docs/state-machine.md is out of date: paste worker.machine.mermaid() into its mermaid block"
    )


def test_the_checked_in_doc_is_the_generated_one() -> None:
    from worker.machine import diagram

    doc = (Path(__file__).resolve().parents[2] / "docs" / "state-machine.md").read_text()
    assert doc == diagram.document(), (
        "docs/state-machine.md is out of date: python -m worker.machine.diagram > docs/state-machine.md"
    )


def test_the_table_is_complete_in_the_source() -> None:
    """Abort and deadline are rows of every node (nothing adds them at import time), and the
    terminal nodes are not in it (they absorb events)."""
    for node, row in m.TABLE.items():
        assert all(ev in row for ev in m.EVERYWHERE), node
    assert not set(m.TABLE) & {p.value for p in m.TERMINAL_PHASES}


def test_no_status_is_spelled_as_a_phase() -> None:
    """A run status the machine is in (awaiting, ended) is RunStatus's member itself: Phase holds only
    the states no status names, and a checkpoint's phase reads back as the same member."""
    assert not {p.value for p in m.Phase} & {s.value for s in RunStatus}
    for phase in (*m.Phase, *m.STATUS_PHASES):
        state = m.RunState(run_id="r", phase=phase)
        assert m.RunState.model_validate_json(state.model_dump_json()).phase is phase


def test_an_economy_call_parks_the_run_and_its_resume_asks_again() -> None:
    s, cmds = go(calling(), m.ModelDeferred(T0, "r1:0", 123))
    assert s.node == RunStatus.AWAITING_MODEL and s.terminal is False
    park = [c for c in cmds if isinstance(c, m.AwaitModel)]
    assert park == [m.AwaitModel("r1:0", 1, 123)]
    assert any(isinstance(c, m.Emit) and c.payload.get("status") == "awaiting_model" for c in cmds)
    s, cmds = go(s, m.Resumed(T0))
    assert s.node == m.CALLING
    assert [c.request.model_call_index for c in cmds if isinstance(c, m.CallModel)] == [1]
