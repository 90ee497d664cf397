"""A run's first state (machine.initial_state), copied from defaults validated once, is the state
RunState validates, and holds containers of its own."""

from __future__ import annotations

from worker.machine.state import RunState, initial_state


def test_the_first_state_is_the_validated_one() -> None:
    made, validated = initial_state("r1", "s1"), RunState(run_id="r1", session_id="s1")
    assert made == validated
    assert made.model_dump() == validated.model_dump()
    assert made.model_fields_set == validated.model_fields_set == {"run_id", "session_id"}


def test_no_two_runs_share_a_container() -> None:
    a, b = initial_state("r1"), initial_state("r2")
    for name, value in a.__dict__.items():
        if isinstance(value, list | dict):
            assert value is not b.__dict__[name], name
