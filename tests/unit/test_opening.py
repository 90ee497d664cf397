"""Which events of a job's first steps a script wrote already (worker/runner/opening.py ``Opening``):
a new run's opening event (its acquisition's), and the first event of the answer that resumed a
parked run (the answer's script's, RunField.ANSWERED), each left out of the machine's steps once."""

from __future__ import annotations

from agentmill_client.models import EventKind
from worker.machine import Emit
from worker.runner.opening import Opening


def result(call_id: str) -> Emit:
    return Emit(EventKind.TOOL_RESULT, {"toolCallId": call_id, "name": "lookup", "content": "x"})


def test_the_answers_event_past_the_checkpoint_is_left_out_once() -> None:
    o = Opening(0, "7:tool_result:c1.0", 6)
    assert o.since(6) == 7  # the deltas a crash cut off come after it
    assert not o.written_already(result("c1.1"))  # another call's: the machine's
    assert not o.written_already(Emit(EventKind.APPROVAL, {"toolCallId": "c1.0"}))  # another kind
    assert o.written_already(result("c1.0"))
    assert not o.written_already(result("c1.0"))  # once


def test_an_answer_a_commit_of_the_run_holds_already_is_the_machines_again() -> None:
    """The checkpoint is at or past the answer's seq: the run took it up and committed since (a later
    round's answer came back on the queue without a script's event, e.g. before the run parked)."""
    o = Opening(0, "7:tool_result:c1.0", 9)
    assert (o.since(9), o.answered_seq) == (9, 0)
    assert not o.written_already(result("c1.0"))


def test_no_answer_written_and_the_opening_event() -> None:
    o = Opening(3, "", 0)
    assert not o.written_already(result("c1.0"))
    running = Emit(EventKind.STATUS, {"status": "running", "agent": "a"})
    assert o.written_already(running) and not o.written_already(running)
