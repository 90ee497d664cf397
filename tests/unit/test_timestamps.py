"""Times on calls and messages: ``calledAt`` on tool records and tool events,
``calledLlmAt`` in the state and on ``assistant_message`` events, ``createdAt`` on the messages a
session keeps; all from event times on the machine and the injected clock in the runner."""

from __future__ import annotations

import orjson

from agentmill_client.models import Message, RunInput, ToolCall, ToolResult
from shared.profiles import AgentProfile
from shared.tool_records import ToolRecord, ToolState
from tests.unit.machine_driver import config
from worker import machine as m
from worker.adapters.memory_store import (
    MemoryHost,
    MemoryModels,
    MemoryRun,
    MemoryRunStore,
    MemorySessionStore,
    MemoryTools,
)
from worker.core import context
from worker.core.policy import ModelFailure
from worker.models.scripted import ScriptedProvider
from worker.runner import RunDriver, RunPorts


def emits(cmds: list[m.Command], kind: str) -> list[dict[str, object]]:
    return [c.payload for c in cmds if isinstance(c, m.Emit) and c.kind == kind]


def test_the_machine_stamps_calls_and_messages_with_the_times_of_its_events() -> None:
    s, _ = m.decide(m.initial_state("r1"), m.Started(100, config(), [Message(role="user", content="hi")]))
    assert s.transcript[0].created_at == 100
    s, _ = m.decide(s, m.ContextLoaded(200, []))
    assert s.called_llm_at_ms == 200
    reply = Message(
        role="assistant", tool_calls=[ToolCall(id="a", name="echo"), ToolCall(id="b", name="calc")]
    )
    s, cmds = m.decide(s, m.ModelReplied(350, reply))
    assert [p["calledAt"] for p in emits(cmds, "tool_call")] == [350, 350]
    assert emits(cmds, "assistant_message")[0]["calledLlmAt"] == 200
    assert s.transcript[-1].created_at == 350
    s, cmds = m.decide(s, m.ToolFinished(900, ToolResult(tool_call_id="a", name="echo", content="x")))
    assert emits(cmds, "tool_result")[0]["calledAt"] == 350  # when it was called, not when it ended
    s, cmds = m.decide(s, m.ToolFinished(1000, ToolResult(tool_call_id="b", name="calc", content="y")))
    assert [msg.created_at for msg in s.transcript[-2:]] == [
        None,
        None,
    ]  # a result's time: its call's calledAt
    assert s.called_llm_at_ms == 1000  # the next call started when the round closed
    s, cmds = m.decide(s, m.ModelFailed(1100, ModelFailure(kind="http", message="x", status=503)))
    s, cmds = m.decide(s, m.RetryTimerFired(2500))
    assert s.called_llm_at_ms == 2500  # a retry is a new start
    s, cmds = m.decide(s, m.ModelReplied(2600, Message(role="assistant", content="done")))
    assert emits(cmds, "assistant_message")[0]["calledLlmAt"] == 2500
    assert s.final_message is not None and s.final_message.created_at == 2600


def test_a_tool_record_keeps_called_at_through_its_json() -> None:
    rec = ToolRecord.finished(3, 1, ToolResult(tool_call_id="c1.0", name="echo", content="x"), 1234)
    assert rec.to_dict()["calledAt"] == 1234 and ToolRecord.from_json(rec.to_json()) == rec
    offered = ToolRecord.offered(ToolCall(id="c1.0", name="remote"), 9_000, 5_000, 77)
    assert offered.timed_out_as("c1.0").called_at_ms == 77
    assert "calledAt" not in ToolRecord.claim(1).to_dict()


class StepClock:
    """The injected clock: every reading is 1 s after the last."""

    def __init__(self) -> None:
        self.t = 1_700_000_000_000

    def now_ms(self) -> int:
        self.t += 1_000
        return self.t

    def monotonic(self) -> float:
        return self.t / 1000.0


async def test_a_run_takes_its_times_from_the_injected_clock() -> None:
    script = [{"toolCalls": [{"name": "echo", "arguments": {"text": "hi"}}]}, {"text": "all done"}]
    run_input = RunInput.model_validate({"agent": "t", "sessionId": "s1", "runtimeHints": {"script": script},
                                         "inputMessages": [{"role": "user", "content": "go", "createdAt": 5}]})  # fmt: skip
    run = MemoryRun.submitted("run-1", run_input)
    clock = StepClock()
    sessions = MemorySessionStore(clock)
    sessions.runs["run-1"] = run
    host = MemoryHost({"t": AgentProfile(name="t", tools=["echo"])})
    models = MemoryModels(lambda p: ScriptedProvider(p.provider))
    ports = RunPorts(MemoryRunStore(run, sessions), sessions, models, MemoryTools(), clock=clock)
    assert await RunDriver(host, ports, "run-1", gen=1).run() == "completed"
    t0, t1 = 1_700_000_000_000, clock.t
    call = run.payloads("tool_call")[0]
    assert t0 < call["calledAt"] <= t1 and run.payloads("tool_result")[0]["calledAt"] == call["calledAt"]
    assert run.tools["c1.0"]["calledAt"] == call["calledAt"]
    llm = [p["calledLlmAt"] for p in run.payloads("assistant_message")]
    assert t0 < llm[0] < call["calledAt"] < llm[1] <= t1
    loop = context.RunLoop.model_validate_json(sessions.history["s1"][0])
    assert loop.assistant is not None and t0 < loop.user.created_at < loop.assistant.created_at <= t1  # type: ignore[operator]
    assert (
        orjson.loads(sessions.history["s1"][0])["user"]["createdAt"] != 5
    )  # the worker's clock, not the caller's
    assert ToolRecord.from_dict(run.tools["c1.0"]).state == ToolState.DONE
