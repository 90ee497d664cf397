"""Who acted, on the pure machine: the actor arrives as data in its event and leaves in the event
it publishes (an abort's status event, an approval event per decision)."""

from __future__ import annotations

from typing import Any

from tests.unit.machine_driver import T0, calling, calls_reply, go
from worker import machine as m

ALICE = {"kind": "key", "id": "k_a", "name": "alice"}
BOB = {"kind": "key", "id": "k_b", "name": "bob"}


def emitted(cmds: list[m.Command], kind: str) -> list[dict[str, Any]]:
    return [c.payload for c in cmds if isinstance(c, m.Emit) and c.kind == kind]


def test_an_aborts_status_event_names_who_aborted() -> None:
    _, cmds = go(calling(), m.AbortRequested(T0, "stop", ALICE))
    assert [(p["status"], p.get("actor")) for p in emitted(cmds, "status")] == [("aborted", ALICE)]
    _, cmds = go(calling(), m.AbortRequested(T0, "stop"))  # none given: none named
    assert "actor" not in emitted(cmds, "status")[-1]


def test_each_decision_is_an_approval_event_naming_who_decided() -> None:
    s = go(calling(), calls_reply(("d", "danger", "{}"), ("e", "danger", "{}")))[0]
    decided = m.ApprovalsDecided(T0, {"d": False, "e": True}, {"d": "no"}, {"d": BOB, "e": ALICE})
    _, cmds = go(s, decided)
    assert emitted(cmds, "approval") == [
        {"toolCallId": "d", "name": "danger", "decision": "rejected", "reason": "no", "actor": BOB},
        {"toolCallId": "e", "name": "danger", "decision": "approved", "actor": ALICE},
    ]
