"""Seed features through a real worker and Redis: error events, limits that end with an answer,
runtimeInitData, recall."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import orjson
import pytest
from redis.asyncio import Redis

from tests.integration.helpers import (
    assert_clean_stream,
    metric_samples,
    producer_for,
    running_worker,
    script_run,
    stream,
    wait_all,
)
from worker.core.preamble import PREAMBLE_V1, unframe, with_preamble
from worker.process.jobs import WorkerProcess

pytestmark = pytest.mark.integration


async def test_failed_model_calls_and_tool_errors_are_error_events(
    redis: Redis, redis_url: str, worker: WorkerProcess
) -> None:
    p = producer_for(redis, redis_url)
    sub = await p.submit(script_run([
        {"error": {"status": 503, "message": "busy"}},
        {"toolCalls": [{"id": "f1", "name": "fail", "arguments": {"message": "broken"}},
                       {"id": "ok", "name": "echo", "arguments": {"text": "x"}}]},
        {"error": {"status": 400, "message": "bad request"}},
    ]))  # fmt: skip
    rec = (await wait_all(p, [sub.run_id], 15))[sub.run_id]
    assert rec.status.value == "failed"
    events = await stream(redis, sub.run_id)
    assert_clean_stream(events)
    errs = [(e.payload["scope"], e.payload["code"]) for e in events if e.kind == "error"]
    assert errs == [
        ("model", "model_http_503"), ("tool", "tool_failed"), ("model", "model_http_400"), ("run", "model_http_400")
    ]  # fmt: skip
    tool_err = next(e.payload for e in events if e.kind == "error" and e.payload["scope"] == "tool")
    assert tool_err["toolCallId"] == "c1.0" and "broken" in tool_err["message"]


async def test_a_run_at_its_iteration_limit_completes_with_an_answer_and_stop_reason(
    redis: Redis, redis_url: str, worker: WorkerProcess
) -> None:
    p = producer_for(redis, redis_url)
    echo = {"toolCalls": [{"name": "echo", "arguments": {"text": "found it"}}]}
    sub = await p.submit(script_run([echo, echo, {"echoContext": True}, {"text": "never asked"}],
                                    loopLimits={"maxIterations": 2}))  # fmt: skip
    rec = (await wait_all(p, [sub.run_id], 15))[sub.run_id]
    assert rec.status.value == "completed" and rec.result is not None
    assert rec.result.stop_reason == "max_iterations" and rec.result.iterations == 3
    seen = orjson.loads(rec.result.final_assistant_message.content)  # type: ignore[union-attr]
    assert seen["tools"] == []  # the last call offers no tools…
    assert seen["messages"][-1]["role"] == "user" and "final answer" in seen["messages"][-1]["content"]
    assert [unframe(m["content"]) for m in seen["messages"] if m["role"] == "tool"] == [
        "found it",
        "found it",
    ]
    events = await stream(redis, sub.run_id)
    assert_clean_stream(events)
    assert events[-1].payload["stopReason"] == "max_iterations"
    assert any(e.payload.get("status") == "limit_reached" for e in events)


class BodyRecorder:
    """A local HTTP tool endpoint (a thread of the test process) that keeps every body it gets."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        rec = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                rec.bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                out = b'{"ok": true}'
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


async def test_runtime_init_data_reaches_the_prompt_and_http_tools(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    rec = BodyRecorder()
    profile = {
        "name": "ctx", "provider": {"kind": "scripted", "mode": "script"},
        "systemPrompt": "You serve {{customer.name}} (plan {{plan}}) in run {{runId}}; {{unknown}} stays.",
        "httpTools": [{"name": "lookup", "url": f"http://127.0.0.1:{rec.port}/t", "allowHosts": ["127.0.0.1"]}],
    }  # fmt: skip
    path = tmp_path / "profiles.json"
    path.write_bytes(orjson.dumps({"profiles": [profile]}))
    p = producer_for(redis, redis_url, profiles=str(path))
    body = {**script_run([{"toolCalls": [{"id": "l1", "name": "lookup", "arguments": {"q": "x"}}]},
                          {"echoContext": True}]),
            "agent": "ctx", "runId": "ctx-run", "runtimeInitData": {"customer": {"name": "ACME"}, "plan": 3}}  # fmt: skip
    try:
        async with running_worker(redis_url, profiles=str(path)):
            rec_ = (await wait_all(p, [(await p.submit(body)).run_id], 15))["ctx-run"]
    finally:
        rec.server.shutdown()
    assert rec_.status.value == "completed"
    seen = orjson.loads(rec_.result.final_assistant_message.content)  # type: ignore[union-attr]
    assert seen["messages"][0]["content"].startswith(
        with_preamble(PREAMBLE_V1, "You serve ACME (plan 3) in run ctx-run; {{unknown}} stays.")
    )
    assert rec.bodies == [{"runId": "ctx-run", "toolCallId": "c1.0", "name": "lookup", "arguments": {"q": "x"},
                           "runtimeInitData": {"customer": {"name": "ACME"}, "plan": 3}}]  # fmt: skip


async def test_a_result_compacted_away_in_the_current_run_is_recalled(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    tight = {"name": "tight", "provider": {"kind": "scripted", "mode": "script"}, "tools": ["echo"],
             "compaction": {"maxMessages": 4, "keepRecent": 1}}  # fmt: skip
    path = tmp_path / "profiles.json"
    path.write_bytes(orjson.dumps({"profiles": [tight]}))
    p = producer_for(redis, redis_url, profiles=str(path))
    long_result = "START-1 " + "x" * 600 + " END-1"
    script = [
        {"toolCalls": [{"id": "e1", "name": "echo", "arguments": {"text": long_result}}]},
        {"toolCalls": [{"id": "e2", "name": "echo", "arguments": {"text": "second"}}]},
        {"echoContext": True, "toolCalls": [{"id": "r1", "name": "recall_tool_call", "arguments": {"callId": "c1.0"}}]},
        {"echoContext": True},
    ]  # fmt: skip
    body = {**script_run(script), "agent": "tight"}  # no session: the run recalls its own calls
    async with running_worker(redis_url, profiles=str(path)) as wp:
        sub = await p.submit(body)
        rec = (await wait_all(p, [sub.run_id], 15))[sub.run_id]
        samples = metric_samples(wp.metrics.render().decode())
    assert rec.status.value == "completed"
    removed = [e.payload for e in await stream(redis, sub.run_id) if e.kind == "compaction"]
    # The monitoring points: what compaction removed, and time per state.
    assert (
        samples[("agentmill_compaction_removed_messages_total", ())] == sum(c["removed"] for c in removed) > 0
    )
    assert (
        samples[("agentmill_compaction_removed_tokens_total", ())]
        == sum(c["removedTokens"] for c in removed)
        > 0
    )
    for state in ("tool_running", "compacting", "model_running.calling"):
        assert samples[("agentmill_state_duration_seconds_count", (("state", state),))] >= 1
    events = await stream(redis, sub.run_id)
    assert any(e.kind == "compaction" for e in events)
    asked = orjson.loads(next(e for e in events if e.kind == "assistant_message" and "c3.0" in str(e.payload))
                         .payload["message"]["content"])  # fmt: skip
    before = orjson.dumps(asked["messages"]).decode()
    assert "END-1" not in before  # the result was compacted away (cut short in the summary)…
    assert "[c1.0]" in before  # …its call id stays in the model input…
    assert "recall_tool_call" in asked["tools"] and "recall_tool_call" in asked["messages"][0]["content"]
    recalled = next(
        e.payload for e in events if e.kind == "tool_result" and e.payload["toolCallId"] == "c3.0"
    )
    assert recalled["content"] == long_result and not recalled["isError"]  # …and recall brings it back whole
    final = orjson.loads(rec.result.final_assistant_message.content)  # type: ignore[union-attr]
    assert long_result in [unframe(m["content"]) for m in final["messages"] if m["role"] == "tool"]


async def test_a_run_at_its_tool_round_limit_completes_with_an_answer(
    redis: Redis, redis_url: str, worker: WorkerProcess
) -> None:
    p = producer_for(redis, redis_url)
    echo = {"toolCalls": [{"name": "echo", "arguments": {"text": "found it"}}]}
    sub = await p.submit(script_run([echo, echo, {"echoContext": True}], loopLimits={"maxToolRounds": 1}))
    rec = (await wait_all(p, [sub.run_id], 15))[sub.run_id]
    assert rec.status.value == "completed" and rec.result is not None
    assert rec.result.stop_reason == "max_tool_rounds"
    seen = orjson.loads(rec.result.final_assistant_message.content)  # type: ignore[union-attr]
    tool_msgs = [unframe(m["content"]) for m in seen["messages"] if m["role"] == "tool"]
    assert tool_msgs[0] == "found it" and "not executed: loopLimits.maxToolRounds=1 reached" in tool_msgs[1]
    assert seen["tools"] == []
    events = await stream(redis, sub.run_id)
    assert [e.payload["isError"] for e in events if e.kind == "tool_result"] == [False, True]
    assert events[-1].payload["stopReason"] == "max_tool_rounds"
