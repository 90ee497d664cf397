"""The machine's state copy (worker/machine/steps.py ``up``) is pydantic's ``model_copy`` with
updates, done without its generic path: the same state, the same fields set, and the assumptions
that make the short path valid still hold for RunState. A run's result (``result_of``) is built the
same way, as validating its fields would make it."""

from __future__ import annotations

from typing import Any

import pytest

from agentmill_client.codec import encode
from agentmill_client.models import Message, RunError, RunResult, RunStatus, Usage
from shared.model_copies import built
from tests.unit.machine_driver import config
from worker.machine.state import CallPhase, Phase, RunState
from worker.machine.steps import result_of, up

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


def _result_kwargs(s: RunState) -> dict[str, Any]:
    """What result_of gives RunResult, read back from its result (each field passed)."""
    r = result_of(s)
    return {n: getattr(r, n) for n in r.model_fields_set}


@pytest.mark.parametrize(
    "state",
    [
        BASE,
        up(
            BASE,
            phase=RunStatus.COMPLETED,
            final_message=Message(role="assistant", content="yes"),
            usage=Usage(input_tokens=5, output_tokens=2, cost_usd=0.5),
            iterations=1,
            finish_reason="stop",
            output={"a": [1]},
            final_call="max_iterations",
        ),
        up(
            BASE,
            phase=RunStatus.FAILED,
            last_error=RunError(code="x", message="y"),
            children_usage=Usage(input_tokens=1),
        ),
        up(BASE, config=config(include_messages=True), phase=RunStatus.COMPLETED),
    ],
)
def test_a_result_is_the_one_validating_its_fields_makes(
    state: RunState, monkeypatch: pytest.MonkeyPatch
) -> None:
    """result_of builds the RunResult of values the state holds, validated already: the one
    ``RunResult(**fields)`` makes, without validating them again."""
    kwargs = _result_kwargs(state)
    theirs = RunResult(**kwargs)

    def refused(*_: Any, **__: Any) -> None:
        raise AssertionError("validated again")

    monkeypatch.setattr(RunResult, "__init__", refused)
    ours = result_of(state)
    assert ours == theirs and repr(ours) == repr(theirs)
    assert ours.model_fields_set == theirs.model_fields_set == set(kwargs)
    assert ours.model_dump_json(by_alias=True) == theirs.model_dump_json(by_alias=True)
    assert encode(ours) == encode(theirs)


def test_built_refuses_a_model_with_default_factories() -> None:
    with pytest.raises(AssertionError):
        built(RunState, run_id="r")
