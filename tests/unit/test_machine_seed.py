"""The seed features on the pure machine: error events, limits that end with an answer,
client-executed tools, time in state and what compaction removed."""

from __future__ import annotations

from typing import Any

from tests.unit.machine_driver import T0, calling, calls_reply, failure, go, result
from worker import machine as m


def errors(cmds: list[m.Command]) -> list[dict[str, Any]]:
    return [c.payload for c in cmds if isinstance(c, m.Emit) and c.kind == "error"]


def test_every_failed_model_call_emits_an_error_event() -> None:
    s, cmds = go(calling(), failure())
    assert errors(cmds) == [
        {"scope": "model", "code": "model_http_503", "message": "boom", "retryable": True,
         "modelCallIndex": 1, "attempt": 0, "httpStatus": 503}
    ]  # fmt: skip
    s, cmds = go(s, m.RetryTimerFired(T0), failure(status=401))
    got = errors(cmds)
    assert [(e["scope"], e["code"]) for e in got] == [("model", "model_http_401"), ("run", "model_http_401")]
    assert got[0]["retryable"] is False and got[0]["attempt"] == 1
    _, cmds = go(calling(), failure(kind="overflow", status=None))
    assert [e["code"] for e in errors(cmds)] == ["model_overflow"]


def test_tool_errors_emit_error_events_and_successes_do_not() -> None:
    s, cmds = go(calling(), calls_reply(("a", "echo", "{}"), ("b", "nope", "{}"), ("c", "echo", "[1]")))
    assert [(e["toolCallId"], e["code"]) for e in errors(cmds)] == [
        ("b", "tool_refused"),
        ("c", "tool_refused"),
    ]
    s, cmds = go(s, result("a", "fine"))
    assert errors(cmds) == []
    s, cmds = go(calling(), calls_reply(("a", "echo", "{}")))
    s, cmds = go(
        s, m.ToolFinished(T0, result("a", "error: down").result.model_copy(update={"is_error": True}))
    )
    assert [(e["scope"], e["code"], e["name"], e["message"]) for e in errors(cmds)] == [
        ("tool", "tool_failed", "echo", "error: down")
    ]
    s, cmds = go(
        calling(), calls_reply(("d", "danger", "{}")), m.ApprovalsDecided(T0, {"d": False}, {"d": "no"})
    )
    assert [e["code"] for e in errors(cmds)] == ["tool_rejected"]


def test_aborts_are_not_errors() -> None:
    _, cmds = go(calling(), m.AbortRequested(T0, "stop"))
    assert errors(cmds) == []
