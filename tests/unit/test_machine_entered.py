"""decide stamps the time a run entered its node on the state its handler made for the step, in
place when decide alone holds it; a state anyone else holds is never changed."""

from __future__ import annotations

from agentmill_client.models import Message
from tests.unit.machine_driver import T0, config, text_reply
from worker import machine as m
from worker.machine.steps import up
from worker.machine.table import _entered


def test_a_state_decide_alone_holds_is_stamped_where_it_is() -> None:
    s = m.initial_state("r1")
    out = _entered(s, 42)
    assert out is s
    copy = up(m.initial_state("r1"), node_since_ms=42)
    assert out == copy and out.model_fields_set == copy.model_fields_set


def test_a_state_held_elsewhere_is_copied_and_left_as_it_was() -> None:
    s = m.initial_state("r1")
    held = [s]
    out = _entered(s, 42)
    assert out is not s and out.node_since_ms == 42 and "node_since_ms" in out.model_fields_set
    assert held[0].node_since_ms == 0 and "node_since_ms" not in s.model_fields_set


def test_no_state_of_a_run_changes_after_decide_answered_it() -> None:
    """Each state decide answers along a run, and each it was given, reads the same at the end."""
    events: list[m.Event] = [
        m.Started(T0, config(), [Message(role="user", content="hi")]),
        m.ContextLoaded(T0 + 1, []),
        m.ModelStreamOpened(T0 + 2),
        text_reply("done"),
    ]
    states = [m.initial_state("r1")]
    seen = [states[0].model_dump()]
    for e in events:
        new, _ = m.decide(states[-1], e)
        assert new is not states[-1] and new.node_since_ms == e.now_ms
        states.append(new)
        seen.append(new.model_dump())
    assert [s.model_dump() for s in states] == seen
    assert states[-1].terminal
