"""A step's commit call (RedisRunStore._commit_call), built by position, carries each of the step's
fields to the Commit field that names it, as a call built by keyword does."""

from __future__ import annotations

from typing import Any

import pytest

from agentmill_client.models import Usage
from shared.calls.steps import Commit
from tests.support.schema import K
from worker.adapters.redis_store import RedisRunStore
from worker.core.commit_step import CommitStep, Outbox, SessionUpdate, Settlement, TranscriptWrite, UsageTally


def store() -> RedisRunStore:
    s = RedisRunStore(None, None, None, K, "r1")  # type: ignore[arg-type]  # no round trip here
    s.epoch, s.last_seq, s.lease_id, s.attempts = 3, 9, "w1", {"c1": 2}
    return s


def outbox(settle: Settlement | None = None) -> Outbox:
    return Outbox([("status", 5, b'{"a":1}')], ["c1"], [("c2", b'{"r":1}')], settle)


def by_keyword(step: CommitStep, **tail: Any) -> Commit:
    u = step.usage
    return Commit(
        epoch=3, first_seq=10, lease_id="w1", run_id="r1", status=step.status, ckpt=step.checkpoint or b"",
        iterations=step.iterations, usage_in=u.input_tokens if u else None, usage_out=u.output_tokens if u else None,
        usage_estimated=("1" if u.estimated else "0") if u else "",
        usage_cost=repr(u.cost_usd) if u and u.cost_usd is not None else "",
        usage_cache_read=(u.cache_read_tokens or None) if u else None,
        usage_cache_write=(u.cache_write_tokens or None) if u else None,
        transcript_mode=("a" if step.transcript.append else "s") if step.transcript else "",
        transcript=step.transcript.data if step.transcript else b"", n_claims=1, n_records=1, ts=5, n_events=1,
        sections=("status", b'{"a":1}', "c1", 3, "c2", b'{"r":1}'), **tail,
    )  # fmt: skip


def test_a_running_step_sends_its_tail_up_to_its_usage() -> None:
    step = CommitStep(outbox(), checkpoint=b"{}", iterations=4, usage=Usage(input_tokens=11, output_tokens=12,
                      cache_read_tokens=13, cache_write_tokens=14, cost_usd=0.5, estimated=True),
                      transcript=TranscriptWrite(True, b",{}"))  # fmt: skip
    call = store()._commit_call(step)
    assert call == by_keyword(step)
    assert len(call.argv()) == 13 - 1 + 6 + 7  # the head, its sections spread, then iterations and usage
    plain = CommitStep(
        outbox(), checkpoint=b"{}", iterations=4, usage=Usage(input_tokens=11, output_tokens=12)
    )
    assert store()._commit_call(plain).argv()[-4:] == [4, 11, 12, "0"]  # no cost, no cache counts


def test_a_step_that_changed_neither_iterations_nor_usage_sends_no_tail() -> None:
    step = CommitStep(outbox(), checkpoint=b"{}", transcript=TranscriptWrite(True, b",{}"))
    call = store()._commit_call(step)
    assert call == by_keyword(step)
    assert len(call.argv()) == 13 - 1 + 6  # the head and its sections: nothing sent empty but the status
    assert [a for a in call.argv() if a in ("", b"")] == [""]


@pytest.mark.parametrize("with_settle", [False, True])
def test_an_ending_step_carries_every_tail_field_to_its_own_place(with_settle: bool) -> None:
    settle = Settlement(["b", "h"], "m1", 21, 22, 23) if with_settle else None
    session = SessionUpdate("s1", b"[1]", [("t1", b'{"x":1}')], [b'{"c":1}'])
    step = CommitStep(
        outbox(settle), checkpoint=b"{}", status="completed", aux=b'{"out":1}', session=session,
        approval_timeout_ms=31, run_deadline_ms=32, iterations=4, error_code="e1", children=b"[2]",
        usage=Usage(input_tokens=11, output_tokens=12), tally=UsageTally("t", "2026-11-30", [("in", 11)], 41),
        config=b'{"cfg":1}', transcript=TranscriptWrite(False, b"{}"),
    )  # fmt: skip
    settled: dict[str, Any] = (
        {"settle_member": "m1", "settle_tokens": 21, "settle_nano_usd": 22, "settle_ttl_ms": 23}
        if settle
        else {}
    )
    assert store()._commit_call(step) == by_keyword(
        step, aux=b'{"out":1}', session_id="s1", loop=b"[1]", approval_timeout_ms=31, run_deadline_ms=32,
        error_code="e1", children=b"[2]", config=b'{"cfg":1}', usage_ttl=41, n_results=1, n_calls=1, n_usage=1,
        tail_sections=("t1", b'{"x":1}', b'{"c":1}', "in", 11), **settled,
    )  # fmt: skip


def test_a_steps_events_send_their_time_once() -> None:
    """The events of one commit share their ts (Commits stamps them when it publishes): sent once,
    not once an event (each argument costs Redis's Lua bridge some 500 instructions)."""
    events = [("model_delta", 7, b"{}"), ("assistant_message", 7, b'{"m":1}'), ("usage", 7, b"{}")]
    argv = store()._commit_call(CommitStep(Outbox(events), checkpoint=b"{}")).argv()
    assert argv.count(7) == 1 and argv[-7:] == [7, 3, "model_delta", b"{}", "assistant_message", b'{"m":1}',
                                                "usage", b"{}"][-7:]  # fmt: skip
    assert len(argv) == 13 - 1 + 2 * len(events)
