"""Completion semantics: a reply counts only when its stream said it ended (worker.core.policy.reply_failure)."""

from __future__ import annotations

from typing import Any

import pytest

from agentmill_client.models import EventKind, Message, ToolCall
from agentmill_client.statuses import RunStatus
from tests.unit.machine_driver import T0, calling, go, result
from worker import machine as m
from worker.core import policy


def reply(
    finish: str | None, content: str = "", calls: list[ToolCall] | None = None, partial: bool = False
) -> m.ModelReplied:
    msg = Message(role="assistant", content=content, tool_calls=calls)
    return m.ModelReplied(T0, msg, finish_reason=finish, partial=partial)


def statuses(cmds: list[m.Command]) -> list[dict[str, Any]]:
    return [c.payload for c in cmds if isinstance(c, m.Emit) and c.kind == EventKind.STATUS]


@pytest.mark.parametrize(
    ("finish", "expected"),
    [(None, "truncated"), ("content_filter", "content_filter"), ("stop", None), ("tool_calls", None),
     ("length", None), ("function_call", None), ("eos", None)],
)  # fmt: skip
def test_reply_failure_table(finish: str | None, expected: str | None) -> None:
    f = policy.reply_failure(finish)
    assert (f.kind if f else None) == expected
    if f is not None:
        assert policy.classify(f) == ("retryable" if expected == "truncated" else "fatal")
    empty = policy.reply_failure(finish, empty=True)
    assert empty is not None and empty.kind == (expected or "empty")


def test_a_stream_without_finish_reason_is_retried_and_its_deltas_withdrawn() -> None:
    s, cmds = go(calling(), m.ModelStreamOpened(T0), reply(None, "Name a colour. (2", partial=True))
    assert s.node == m.RETRYING and s.iterations == 0 and s.transcript[-1].role == "user"
    st = statuses(cmds)
    assert st[0] == {
        "status": "model_call_discarded",
        "modelCallIndex": 1,
        "attempt": 0,
        "reason": "truncated",
    }
    assert st[1]["status"] == "retrying" and st[1]["reason"] == "truncated"
    assert any(isinstance(c, m.Wait) for c in cmds)
    assert not any(isinstance(c, m.Emit) and c.kind == EventKind.ASSISTANT_MESSAGE for c in cmds)
    # The retry answers in full: the run completes with the whole answer.
    s, cmds = go(s, m.RetryTimerFired(T0 + 5000), reply("stop", "Name a colour. (2)"))
    assert s.phase == RunStatus.COMPLETED
    res = next(c.result for c in cmds if isinstance(c, m.Finish))
    assert (
        res.final_assistant_message is not None
        and res.final_assistant_message.content == "Name a colour. (2)"
    )
    assert res.finish_reason == "stop"


def test_cut_off_streams_until_retries_run_out_fail_the_run() -> None:
    s = calling()
    for _ in range(s.cfg.retry.max_retries):
        s, _ = go(s, reply(None, "par"), m.RetryTimerFired(T0))
    s, cmds = go(s, reply(None, "par"))
    assert s.phase == RunStatus.FAILED and s.last_error is not None
    assert s.last_error.code == "model_retries_exhausted" and "truncated" in s.last_error.message
    assert next(c.result for c in cmds if isinstance(c, m.Finish)).finish_reason is None


def test_length_on_a_text_answer_completes_marked_length() -> None:
    s, cmds = go(calling(), reply("length", "The first three primes are 2, 3 and"))
    res = next(c.result for c in cmds if isinstance(c, m.Finish))
    assert s.phase == RunStatus.COMPLETED and res.finish_reason == "length"
    assert res.final_assistant_message is not None and res.final_assistant_message.content.endswith("3 and")
    assert statuses(cmds)[-1] == {"status": "completed", "iterations": 1, "finishReason": "length"}
    msg_event = next(
        c.payload for c in cmds if isinstance(c, m.Emit) and c.kind == EventKind.ASSISTANT_MESSAGE
    )
    assert msg_event["finishReason"] == "length"


def test_length_inside_tool_arguments_is_never_executed_and_the_model_is_told() -> None:
    calls = [
        ToolCall(id="c1", name="echo", arguments='{"text": "a"}'),
        ToolCall(id="c2", name="calc", arguments='{"x": 12'),
    ]
    s, cmds = go(calling(), reply("length", calls=calls))
    assert not any(isinstance(c, m.ExecuteTool) for c in cmds)
    results = [c.payload for c in cmds if isinstance(c, m.Emit) and c.kind == EventKind.TOOL_RESULT]
    assert [(r["toolCallId"], r["isError"], r["content"]) for r in results] == [
        ("c1", True, policy.CUT_OFF_CALL), ("c2", True, policy.CUT_OFF_CALL)
    ]  # fmt: skip
    # The model is asked again with those error results in its context.
    assert s.node == m.CALLING and s.tool_calls_used == 0
    req = next(c.request for c in cmds if isinstance(c, m.CallModel))
    assert [(x.role, x.content) for x in req.messages[-2:]] == [("tool", policy.CUT_OFF_CALL)] * 2
    # The same calls with a complete reply run.
    s, cmds = go(s, reply("tool_calls", calls=calls[:1]))
    assert [c.call.id for c in cmds if isinstance(c, m.ExecuteTool)] == ["c1"]
    s, _ = go(s, result("c1"))
    assert s.node == m.CALLING


def test_content_filter_fails_the_run_with_its_own_code() -> None:
    s, cmds = go(calling(), m.ModelStreamOpened(T0), reply("content_filter", "I can", partial=True))
    assert s.phase == RunStatus.FAILED and s.last_error is not None
    assert s.last_error.code == "model_content_filter" and not s.last_error.retryable
    assert not any(isinstance(c, m.Wait) for c in cmds)
    assert statuses(cmds)[0]["status"] == "model_call_discarded"  # its partial text is withdrawn
    assert next(c.result for c in cmds if isinstance(c, m.Finish)).finish_reason == "content_filter"


def test_a_plain_stop_completes_with_finish_reason_stop() -> None:
    _, cmds = go(calling(), reply("stop", "Blue."))
    res = next(c.result for c in cmds if isinstance(c, m.Finish))
    assert (res.status.value, res.finish_reason) == ("completed", "stop")


def test_an_empty_answer_is_retried_not_completed() -> None:
    """llama-cpp-python with tool_choice auto may stream just ``content: ""`` and finish_reason stop."""
    s, cmds = go(calling(), reply("stop", ""))
    assert s.node == m.RETRYING and statuses(cmds)[-1]["reason"] == "empty"
    s, cmds = go(s, m.RetryTimerFired(T0), reply("stop", "Blue."))
    assert s.phase == RunStatus.COMPLETED
