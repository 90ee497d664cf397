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
    call = Commit(3, 7, "w1", "r1", n_claims=1, ts=5, n_events=1, sections=("status", b"{}", "c1", 1))
    argv = call.argv()
    assert argv[:6] == [3, 7, "w1", "r1", "", b""] and argv[-6:] == [5, 1, "status", b"{}", "c1", 1]
    assert len(argv) == len(names) - 1 + 4
    usage = Commit(3, 7, "w1", "r1", iterations=2, usage_in=None, usage_out=5)
    assert usage.argv()[len(names) - 1 :] == [2, "", 5]


def test_a_commit_sends_its_tail_up_to_the_last_field_it_needs() -> None:
    """The tail goes up to its last field that is not its default: a step's commit after its tools
    ran sends none of it, the one after its model call its iterations and usage, an ending all of
    it. The Lua reads an unsent tail field as its default, as argv would have sent it."""
    head = [f.name for f in dataclasses.fields(Commit) if not f.metadata.get("agentmill.tail")]
    tail = [f.name for f in dataclasses.fields(Commit) if f.metadata.get("agentmill.tail")]
    assert tail[:7] == ["iterations", "usage_in", "usage_out", "usage_estimated", "usage_cost",
                        "usage_cache_read", "usage_cache_write"]  # fmt: skip
    assert {"aux", "session_id", "config", "settle_member", "n_usage", "transcript_staged"} <= set(tail)
    steady = Commit(3, 7, "w1", "r1", ckpt=b"{}", transcript_mode="a", transcript=b",{}", ts=5, n_events=1,
                    sections=("status", b"{}"))  # fmt: skip
    assert len(steady.argv()) == len(head) - 1 + 2  # no argument left empty but the status
    assert [a for a in steady.argv()[:-2] if a in ("", b"")] == [""]
    modelled = Commit(3, 7, "w1", "r1", ckpt=b"{}", ts=5, n_events=1, sections=("status", b"{}"), iterations=1,
                      usage_in=10, usage_out=2, usage_estimated="0")  # fmt: skip
    assert modelled.argv()[len(head) - 1 + 2 :] == [1, 10, 2, "0"]
    ending = Commit(3, 7, "w1", "r1", status="completed", aux=b"{}", ts=5, n_events=1, sections=("status", b"{}"),
                    usage_ttl=60, n_usage=1, tail_sections=("a|runs", 1))  # fmt: skip
    argv = ending.argv()
    assert len(argv) == len(head) - 1 + 2 + len(tail) - 1 + 2
    assert argv[len(head) - 1 + 2 + tail.index("aux")] == b"{}" and argv[-2:] == ["a|runs", 1]
    settling = Commit(3, 7, "w1", "r1", settle_member="h1", settle_tokens=5)
    assert len(settling.argv()) == len(head) - 1 + tail.index("settle_tokens") + 1
    at = Commit.positions()
    assert at["ARG.ITERATIONS"] == "(ARGV[TAIL + 1] or '')" and at["ARG.N_USAGE"].endswith(" or '0')")
    assert at["ARGN.AUX"] == f"TAIL + {tail.index('aux') + 1}"
    assert at["ARGN.TAIL_SECTIONS"] == f"TAIL + {len(tail)}"


def test_a_commit_and_a_publish_answer_the_same_verdicts() -> None:
    assert Commit.verdict([b"seq_conflict", b"4"]) is AppendVerdict.SEQ_CONFLICT
    assert Publish.verdict([b"ok", b"9"]) is AppendVerdict.OK
    part = Partition(0, 1)
    assert Commit(1, 1, "w", "r").keys(part) == [*part.run_keys("r"), part.worker_lease("w")]
    assert Publish(1, 1, "w", 5, 0, ()).keys(part, "r") == [*part.run_keys("r")[:2], part.worker_lease("w")]


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
