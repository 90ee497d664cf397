"""The seed features on the pure machine: error events, limits that end with an answer,
client-executed tools, time in state and what compaction removed."""

from __future__ import annotations

from typing import Any

from agentmill_client.models import Message, ToolCall
from agentmill_client.statuses import RunStatus
from tests.unit.machine_driver import T0, calling, calls_reply, config, failure, go, result, text_reply
from worker import machine as m
from worker.core.config import ToolSpec


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


# ---- limits that end with an answer ----


def test_max_iterations_asks_once_more_without_tools_and_completes_naming_the_limit() -> None:
    s, cmds = go(calling(config(max_iterations=1, on_limit="answer")), calls_reply(("a", "echo", "{}")))
    s, cmds = go(s, result("a"))
    assert s.node == m.CALLING and s.final_call == "max_iterations"
    req = next(c.request for c in cmds if isinstance(c, m.CallModel))
    assert req.tools == [] and "final answer" in req.messages[-1].content and req.messages[-1].role == "user"
    assert {"status": "limit_reached", "limit": "max_iterations", "action": "final_answer"} in [
        c.payload for c in cmds if isinstance(c, m.Emit)
    ]
    s, cmds = go(s, text_reply("here is what I found"))
    assert s.phase == RunStatus.COMPLETED and s.final_message is not None
    res = m.result_of(s)
    assert (
        res.stop_reason == "max_iterations" and res.final_assistant_message.content == "here is what I found"
    )  # type: ignore[union-attr]
    assert cmds[-2].payload["stopReason"] == "max_iterations"  # type: ignore[union-attr]


def test_the_last_call_refuses_tool_calls_and_keeps_the_text() -> None:
    s, _ = go(
        calling(config(max_iterations=1, on_limit="answer")), calls_reply(("a", "echo", "{}")), result("a")
    )
    reply = m.ModelReplied(T0, Message(role="assistant", content="partial answer",
                                       tool_calls=[ToolCall(id="x", name="echo")]))  # fmt: skip
    s, cmds = go(s, reply)
    assert s.phase == RunStatus.COMPLETED and s.final_message == Message(
        role="assistant", content="partial answer", created_at=T0
    )
    assert not any(isinstance(c, m.ExecuteTool) for c in cmds)
    assert any(isinstance(c, m.Emit) and c.payload.get("status") == "tool_calls_refused" for c in cmds)
    assert s.transcript[-1].tool_calls is None  # no dangling call in what the session keeps


def test_max_tool_rounds_answers_the_refused_round_then_asks_for_the_answer() -> None:
    s, _ = go(
        calling(config(max_tool_rounds=1, on_limit="answer")), calls_reply(("a", "echo", "{}")), result("a")
    )
    s, cmds = go(s, calls_reply(("b", "echo", "{}"), ("c", "calc", "{}")))
    assert s.node == m.CALLING and s.final_call == "max_tool_rounds"
    assert not any(isinstance(c, m.ExecuteTool) for c in cmds)
    assert [x.tool_call_id for x in s.transcript if x.role == "tool"] == ["a", "b", "c"]
    assert "maxToolRounds=1" in s.transcript[-1].content
    assert [e["code"] for e in errors(cmds)] == ["tool_refused", "tool_refused"]
    s, _ = go(s, text_reply("final"))
    assert m.result_of(s).stop_reason == "max_tool_rounds" and s.phase == RunStatus.COMPLETED


def test_the_last_call_is_bounded_a_failure_still_fails() -> None:
    s, _ = go(
        calling(config(max_iterations=1, on_limit="answer")), calls_reply(("a", "echo", "{}")), result("a")
    )
    s, _ = go(s, failure(status=401))
    assert s.phase == RunStatus.FAILED and m.result_of(s).stop_reason is None


def test_on_limit_fail_keeps_the_old_behaviour() -> None:
    s, _ = go(
        calling(config(max_iterations=1, on_limit="fail")), calls_reply(("a", "echo", "{}")), result("a")
    )
    assert s.phase == RunStatus.FAILED and s.last_error is not None and s.last_error.code == "max_iterations"


# ---- client tools ----


def emits(cmds: list[m.Command], kind: str) -> list[dict[str, Any]]:
    return [c.payload for c in cmds if isinstance(c, m.Emit) and c.kind == kind]


def test_client_calls_are_offered_then_the_run_parks_once_the_worker_has_nothing_to_run() -> None:
    cfg = config(internal_tools=[ToolSpec(name="recall_tool_call")])
    s, cmds = go(
        calling(cfg),
        calls_reply(("w", "echo", "{}"), ("c", "remote", '{"q": 1}'), ("i", "recall_tool_call", "{}")),
    )
    assert [(p["toolCallId"], p["execution"]) for p in emits(cmds, "tool_call")] == [
        ("w", "worker"), ("c", "client"), ("i", "internal")
    ]  # fmt: skip
    offer = next(c for c in cmds if isinstance(c, m.OfferClientCalls))
    assert [c.id for c in offer.calls] == ["c"] and offer.deadlines == {"c": T0 + 5_000}
    assert sorted(c.call.id for c in cmds if isinstance(c, m.ExecuteTool)) == ["i", "w"]  # never the client's
    assert s.phase == m.Phase.TOOL_RUNNING and s.client_waiting == {"c": T0 + 5_000}
    s, cmds = go(s, result("w"), result("i", name="recall_tool_call"))
    assert s.phase == RunStatus.AWAITING_TOOLS and m.result_of(s).status == "awaiting_tools"
    park = next(c for c in cmds if isinstance(c, m.AwaitClient))
    assert [c.id for c in park.pending] == ["c"] and park.deadlines == {"c": T0 + 5_000}
    assert emits(cmds, "status")[-1] == {
        "status": "awaiting_tools",
        "pendingToolCalls": [
            {"toolCallId": "c", "name": "remote", "arguments": '{"q": 1}', "deadlineMs": T0 + 5_000}
        ],
    }
    s, cmds = go(s, m.Resumed(T0), m.ClientResultsReceived(T0, {"c": result("c", "42", "remote").result}))
    assert s.node == m.CALLING and [x.content for x in s.transcript if x.role == "tool"] == ["ok", "42", "ok"]
    assert emits(cmds, "tool_result")[0]["content"] == "42" and s.client_waiting == {}


def test_only_client_calls_park_at_once_and_partial_results_park_again() -> None:
    s, cmds = go(calling(), calls_reply(("a", "remote", "{}"), ("b", "remote", "{}")))
    assert s.phase == RunStatus.AWAITING_TOOLS and not any(isinstance(c, m.ExecuteTool) for c in cmds)
    s, cmds = go(s, m.ClientResultsReceived(T0, {"a": result("a", "1", "remote").result}))
    assert s.phase == RunStatus.AWAITING_TOOLS
    assert [c.id for c in cmds if isinstance(c, m.AwaitClient) for c in c.pending] == ["b"]
    assert not emits(cmds, "status")  # parking again is not news
    timeout = result("b", "error: the client returned no result within 5000 ms", "remote").result
    s, cmds = go(s, m.ClientResultsReceived(T0, {"b": timeout.model_copy(update={"is_error": True})}))
    assert s.node == m.CALLING and s.transcript[-1].content.startswith("error: the client returned no result")
    assert [e["code"] for e in errors(cmds)] == ["client_tool_error"]


def test_client_calls_need_approval_like_any_other_and_abort_ends_the_wait() -> None:
    cfg = config(approval_tools=["remote"])
    s, cmds = go(calling(cfg), calls_reply(("a", "remote", "{}"), ("b", "remote", "{}")))
    assert s.phase == RunStatus.AWAITING_HUMAN and not any(isinstance(c, m.OfferClientCalls) for c in cmds)
    s, cmds = go(s, m.ApprovalsDecided(T0 + 7, {"a": True, "b": False}))
    offer = next(c for c in cmds if isinstance(c, m.OfferClientCalls))
    assert [c.id for c in offer.calls] == ["a"] and offer.deadlines == {"a": T0 + 7 + 5_000}
    assert s.phase == RunStatus.AWAITING_TOOLS
    s, _ = go(s, m.AbortRequested(T0, "stop"))
    assert s.phase == RunStatus.ABORTED


# ---- monitoring points: time per state, what compaction removed ----


def test_the_state_records_when_it_entered_its_node_from_event_times() -> None:
    s, _ = go(calling(), m.ModelStreamOpened(T0 + 40))
    assert s.node == m.STREAMING and s.node_since_ms == T0 + 40
    s, _ = go(s, calls_reply(("a", "remote", "{}")))  # ModelReplied at T0
    assert s.node == RunStatus.AWAITING_TOOLS and s.node_since_ms == T0
    same, _ = go(s, m.Resumed(T0 + 9_000))  # the node does not change: the clock does not restart
    assert same.node_since_ms == T0
    after, _ = go(same, m.ClientResultsReceived(T0 + 9_500, {"a": result("a", "x", "remote").result}))
    assert after.node == m.CALLING and after.node_since_ms == T0 + 9_500


def test_a_compaction_event_says_how_many_estimated_tokens_it_removed() -> None:
    big = [Message(role="user", content="u")] + [Message(role="assistant", content="x" * 4_000)] * 6
    s = calling().model_copy(update={"transcript": big})
    s, _ = go(s, failure(kind="overflow", status=None))
    s, cmds = go(s, m.CompactionDone(T0, big[:1] + big[-1:], 5, "overflow"))
    payload = emits(cmds, "compaction")[0]
    assert payload["removed"] == 5 and payload["removedTokens"] == 5 * (4 + 1000)


def test_client_calls_that_do_not_fit_their_schema_are_refused_not_offered() -> None:
    schema = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}
    tools = [ToolSpec(name="echo"), ToolSpec(name="remote", parameters=schema)]
    s, cmds = go(
        calling(config(tools=tools)),
        calls_reply(("bad", "remote", '{"q": 5}'), ("ok", "remote", '{"q": "x"}')),
    )
    offer = next(c for c in cmds if isinstance(c, m.OfferClientCalls))
    assert [c.id for c in offer.calls] == ["ok"]
    assert [(e["toolCallId"], e["code"]) for e in errors(cmds)] == [("bad", "tool_refused")]
    assert "q: 5 is not of type 'string'" in s.results["bad"].content


def test_the_wait_for_the_client_ends_by_the_runs_own_deadline() -> None:
    s, cmds = go(calling(config(max_run_duration_ms=2_000)), calls_reply(("a", "remote", "{}")))
    offer = next(c for c in cmds if isinstance(c, m.OfferClientCalls))
    assert (
        offer.deadlines == {"a": T0 + 2_000} and offer.timeout_ms == 2_000
    )  # not 5_000, the per-call timeout
    late = result("a", "error: the client returned no result within 5000 ms", "remote").result
    s, _ = go(s, m.ClientResultsReceived(T0 + 2_000, {"a": late.model_copy(update={"is_error": True})}))
    assert (
        s.phase == RunStatus.FAILED and s.last_error is not None and s.last_error.code == "max_run_duration"
    )
