"""A context overflow reduces the whole context: after ``load_older_history`` widened the window,
an overflow the run's own messages cannot absorb narrows the window (the turns it loaded go first,
then the ones it opened with) before the run may end ``context_overflow``. Pure: the machine
driven by a model that refuses any input over its size, as a provider refuses a long prompt."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from agentmill_client.models import Message, RunStatus, ToolCall
from tests.unit.machine_driver import T0, failure, go, text_reply
from tests.unit.test_history_tools import history, loaded, with_tools
from worker import machine as m
from worker.core import context
from worker.machine.window import OVERFLOW, on_overflow, windowed_history


def widened(turns: int, shown: int, loads: int) -> m.RunState:
    """A run that opened with ``shown`` past turns and widened its window ``loads`` times by a
    turn (its own messages compacted as they grow)."""
    s = loaded(with_tools(shown=shown, expand=2).model_copy(update={"max_iterations": 100}), history(turns))
    for n in range(loads):
        call = ToolCall(id=f"w{n}", name="load_older_history")
        s, cmds = go(s, m.ModelReplied(T0, Message(role="assistant", tool_calls=[call])))
        for c in cmds:
            if isinstance(c, m.Compact):
                new, removed = context.compact(c.transcript, c.keep_recent)
                s, _ = go(s, m.CompactionDone(T0, new, removed, c.reason))
    assert s.node == m.CALLING
    return s


def drive(s: m.RunState, fits: int) -> tuple[m.RunState, list[m.Command]]:
    """Answer the machine's commands until the run ends: a model call over ``fits`` messages
    overflows, a compaction is the deterministic one. Checks at every step that the run never
    ends ``context_overflow`` while it still shows past turns."""
    seen: list[m.Command] = []
    request = m.build_messages(s)
    event: m.Event = failure(kind="overflow", status=None) if len(request) > fits else text_reply()
    for _ in range(100):
        shown_before = len(windowed_history(s))
        s, cmds = m.decide(s, event)
        seen += cmds
        fin = next((c for c in cmds if isinstance(c, m.Finish)), None)
        if fin is not None:
            if fin.result.last_error is not None and fin.result.last_error.code == "context_overflow":
                assert shown_before == 0, "ended context_overflow with past turns still shown"
            return s, seen
        call = next((c for c in cmds if isinstance(c, m.CallModel)), None)
        comp = next((c for c in cmds if isinstance(c, m.Compact)), None)
        if comp is not None:
            new, removed = context.compact(comp.transcript, comp.keep_recent)
            event = m.CompactionDone(T0, new, removed, comp.reason)
        elif call is not None:
            too_long = len(call.request.messages) > fits
            event = failure(kind="overflow", status=None) if too_long else text_reply()
        else:
            raise AssertionError(f"unexpected commands {cmds}")
    raise AssertionError("the run did not end")


def test_a_run_widened_by_40_turns_that_overflows_narrows_and_completes() -> None:
    s = widened(turns=60, shown=2, loads=40)
    assert len(windowed_history(s)) == 4 + 80  # two turns opened with, forty loaded
    end, cmds = drive(s, fits=20)
    assert end.phase == RunStatus.COMPLETED
    narrowed = [
        c.payload
        for c in cmds
        if isinstance(c, m.Emit) and c.payload.get("status") == "context_window_narrowed"
    ]
    assert narrowed[0] == {
        "status": "context_window_narrowed",
        "reason": "overflow",
        "contextWindowSize": 4,
        "removed": 80,
    }
    assert end.context_window_size == 4  # the turns it opened with fit: they stay


def test_past_turns_all_go_before_the_run_ends_context_overflow() -> None:
    s = widened(turns=10, shown=2, loads=3)
    end, cmds = drive(s, fits=1 + len(s.transcript))  # the system prompt and the run's own messages fit
    assert end.phase == RunStatus.COMPLETED and end.context_window_size == 0
    sizes = [
        c.payload["contextWindowSize"]
        for c in cmds
        if isinstance(c, m.Emit) and c.payload.get("status") == "context_window_narrowed"
    ]
    assert sizes == [4, 0]
    end, _ = drive(s, fits=1)  # not even the request fits: the run fails, with no past turn shown
    assert (
        end.phase == RunStatus.FAILED
        and end.last_error is not None
        and end.last_error.code == "context_overflow"
    )
    assert end.context_window_size == 0


def test_the_overflow_table_decides_every_case_and_fails_only_without_past_turns() -> None:
    assert set(OVERFLOW) == {(a, b, c) for a in (True, False) for b in (True, False) for c in (True, False)}
    assert {k for k, v in OVERFLOW.items() if v == "fail"} == {(False, True, False), (False, False, False)}
    s = widened(turns=10, shown=2, loads=1)
    assert on_overflow(s) == "narrow"  # the run's own messages are too few to compact
    spent = s.model_copy(update={"overflow_retries": s.cfg.compaction.max_overflow_retries})
    assert on_overflow(spent.model_copy(update={"context_window_size": 0})) == "fail"


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 30), st.integers(0, 4), st.integers(0, 20), st.integers(1, 120))
def test_no_run_ends_context_overflow_while_it_shows_past_turns(
    turns: int, shown: int, loads: int, fits: int
) -> None:
    end, _ = drive(widened(turns, shown, loads), fits)
    assert end.phase in (RunStatus.COMPLETED, RunStatus.FAILED)
    result = m.result_of(end)
    if result.status == RunStatus.FAILED:
        assert result.last_error is not None and result.last_error.code == "context_overflow"
        assert windowed_history(end) == []
