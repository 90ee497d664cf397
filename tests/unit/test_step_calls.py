"""The worker's hot-path calls (shared.calls.steps) and the economy lane's (shared.calls.economy):
their wire order as commit.lua and the others read it."""

from __future__ import annotations

import dataclasses

from shared.calls import CALLS
from shared.calls.economy import EconAdvance, EconEnqueue
from shared.calls.steps import AppendVerdict, Commit, Publish
from shared.keys import Partition


def test_a_commit_sends_its_events_right_after_their_count() -> None:
    """append_refused (prelude.lua) finds a re-sent append's last payload from the events' count,
    which must come just before the events: the last scalar, then the sections."""
    names = [f.name for f in dataclasses.fields(Commit) if not f.metadata.get("agentmill.tail")]
    assert names[:5] == ["epoch", "first_seq", "lease_id", "run_id", "status"]  # the gate's (bench 3d)
    assert names[-2:] == ["n_events", "sections"]
    at = Commit.positions()
    assert at["ARGN.SECTIONS"] == str(len(names)) and at["ARG.N_EVENTS"] == f"ARGV[{len(names) - 1}]"
    call = Commit(3, 7, "w1", "r1", n_claims=1, n_events=1, sections=("status", 5, b"{}", "c1", 1))
    argv = call.argv()
    assert argv[:6] == [3, 7, "w1", "r1", "", b""] and argv[-6:] == [1, "status", 5, b"{}", "c1", 1]
    assert len(argv) == len(names) - 1 + 5
    assert argv[names.index("iterations")] == ""  # None goes as ''


def test_a_steady_commit_sends_no_tail_and_an_ending_sends_all_of_it() -> None:
    """The tail (an ending's, a parked run's, a settlement's fields) goes only with a commit that
    needs one of them: a step's usual commit is some twenty arguments shorter. The Lua reads an
    unsent tail field as its default, as argv would have sent it."""
    head = [f.name for f in dataclasses.fields(Commit) if not f.metadata.get("agentmill.tail")]
    tail = [f.name for f in dataclasses.fields(Commit) if f.metadata.get("agentmill.tail")]
    assert {"aux", "session_id", "config", "settle_member", "n_usage"} <= set(tail) and len(tail) >= 16
    steady = Commit(3, 7, "w1", "r1", ckpt=b"{}", n_events=1, sections=("status", 5, b"{}"))
    assert len(steady.argv()) == len(head) - 1 + 3
    ending = Commit(3, 7, "w1", "r1", status="completed", aux=b"{}", n_events=1, sections=("status", 5, b"{}"),
                    usage_ttl=60, n_usage=1, tail_sections=("a|runs", 1))  # fmt: skip
    argv = ending.argv()
    assert len(argv) == len(head) - 1 + 3 + len(tail) - 1 + 2
    assert argv[len(head) - 1 + 3] == b"{}" and argv[-2:] == ["a|runs", 1]  # aux first, the usage terms last
    settling = Commit(3, 7, "w1", "r1", settle_member="h1", settle_tokens=5)
    assert len(settling.argv()) == len(head) - 1 + len(tail) - 1
    at = Commit.positions()
    assert at["ARG.AUX"] == "(ARGV[TAIL + 1] or '')" and at["ARG.N_USAGE"].endswith(" or '0')")
    assert at["ARGN.TAIL_SECTIONS"] == f"TAIL + {len(tail)}"


def test_a_commit_and_a_publish_answer_the_same_verdicts() -> None:
    assert Commit.verdict([b"seq_conflict", b"4"]) is AppendVerdict.SEQ_CONFLICT
    assert Publish.verdict([b"ok", b"9"]) is AppendVerdict.OK
    part = Partition(0, 1)
    assert Commit(1, 1, "w", "r").keys(part) == [*part.run_keys("r"), part.worker_lease("w")]
    assert Publish(1, 1, "w", 0, ()).keys(part, "r") == [*part.run_keys("r")[:2], part.worker_lease("w")]


def test_the_economy_calls_take_the_endpoints_keys() -> None:
    assert EconEnqueue("c1", b"line", 10).argv() == ["c1", b"line", 10]
    assert EconEnqueue("c1", b"x", 1).keys("ep", "m")[1].endswith(":m")
    assert EconAdvance("h", 2, ("state", "creating", "file", "f1")).argv() == [
        "h",
        2,
        "state",
        "creating",
        "file",
        "f1",
    ]
    assert EconAdvance.positions()["ARGN.TERMS"] == "3"
    assert {"commit", "publish", "acquire", "beat", "econ_close", "econ_lease"} <= set(CALLS)
