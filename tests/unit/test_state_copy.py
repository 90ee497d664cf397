"""The machine's state copy (worker/machine/steps.py ``up``) is pydantic's ``model_copy`` with
updates, done without its generic path: the same state, the same fields set, and the assumptions
that make the short path valid still hold for RunState."""

from __future__ import annotations

from typing import Any

import pytest

from agentmill_client.models import Message, Usage
from worker.machine.state import CallPhase, Phase, RunState
from worker.machine.steps import up

BASE = RunState(run_id="r1", session_id="s1", transcript=[Message(role="user", content="hi")])


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"phase": Phase.MODEL_RUNNING, "call": CallPhase.CALLING},
        {"iterations": 3, "usage": Usage(input_tokens=5, output_tokens=2)},
        {"transcript": [*BASE.transcript, Message(role="assistant", content="yes")], "final_message": None},
    ],
)
def test_up_is_model_copy_with_updates(changes: dict[str, Any]) -> None:
    ours, theirs = up(BASE, **changes), BASE.model_copy(update=changes)
    assert ours == theirs and repr(ours) == repr(theirs)
    assert ours.__pydantic_fields_set__ == theirs.__pydantic_fields_set__
    assert ours.model_dump_json() == theirs.model_dump_json()
    assert ours is not BASE and BASE.iterations == 0  # the original is untouched


def test_the_short_path_s_assumptions_hold() -> None:
    """No extra fields, no private attributes, no post-init: what model_copy does beyond copying
    the fields and the fields-set would be lost."""
    assert RunState.model_config.get("extra") != "allow"
    assert not RunState.__private_attributes__
    assert RunState.__pydantic_post_init__ is None
