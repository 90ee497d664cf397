"""Test helpers for the pure machine: configs, states in every node, and a driver answering commands."""

from __future__ import annotations

from typing import Any

from agentmill_client.models import Message, ToolCall, ToolResult, Usage
from agentmill_client.statuses import RunStatus
from shared.profiles import CompactionConfig, RetryConfig
from worker import machine as m
from worker.core.config import RunConfig, ToolSpec
from worker.core.policy import ModelFailure

T0 = 1_000_000


def config(**kw: Any) -> RunConfig:
    base: dict[str, Any] = dict(
        agent="t",
        system_prompt="sys",
        tools=[
            ToolSpec(name="echo"),
            ToolSpec(name="calc"),
            ToolSpec(name="danger"),
            ToolSpec(name="remote"),
            ToolSpec(
                name="helper",
                parameters={
                    "type": "object",
                    "properties": {"task": {"type": "string"}},
                    "required": ["task"],
                },
            ),
        ],
        client_tools=["remote"],
        agent_tools={"helper": "h"},
        client_tool_timeout_ms=5_000,
        approval_tools=["danger"],
        max_parallel=2,
        retry=RetryConfig(max_retries=2),
        compaction=CompactionConfig(max_messages=30, keep_recent=4, max_overflow_retries=1),
        on_limit="fail",  # the limits' answer mode has its own tests (test_machine_seed.py)
    )
    base.update(kw)
    return RunConfig(**base)


def text_reply(t: str = "done") -> m.ModelReplied:
    return m.ModelReplied(T0, Message(role="assistant", content=t), Usage(input_tokens=3, output_tokens=2))


def calls_reply(*calls: tuple[str, str, str]) -> m.ModelReplied:
    tcs = [ToolCall(id=i, name=n, arguments=a) for i, n, a in calls]
    return m.ModelReplied(T0, Message(role="assistant", content="", tool_calls=tcs))


def failure(kind: str = "http", status: int | None = 503, partial: bool = False) -> m.ModelFailed:
    return m.ModelFailed(
        T0, ModelFailure(kind=kind, message="boom", status=status), jitter=0.5, partial=partial
    )  # type: ignore[arg-type]


def result(call_id: str, content: str = "ok", name: str = "echo") -> m.ToolFinished:
    return m.ToolFinished(T0, ToolResult(tool_call_id=call_id, name=name, content=content))


def go(state: m.RunState, *events: m.Event) -> tuple[m.RunState, list[m.Command]]:
    cmds: list[m.Command] = []
    for e in events:
        state, c = m.decide(state, e)
        cmds += c
    return state, cmds


def started(cfg: RunConfig | None = None) -> m.RunState:
    s, _ = go(m.initial_state("r1"), m.Started(T0, cfg or config(), [Message(role="user", content="hi")]))
    return s


def calling(cfg: RunConfig | None = None) -> m.RunState:
    s, _ = go(started(cfg), m.ContextLoaded(T0, []))
    assert s.node == m.CALLING
    return s


def in_node(node: str) -> m.RunState:
    """A state sitting in ``node``, reached through legal events only."""
    if node == m.Phase.IDLE:
        return m.initial_state("r1")
    if node == m.Phase.PREPARING:
        return started()
    if node == m.CALLING:
        return calling()
    if node == m.STREAMING:
        return go(calling(), m.ModelStreamOpened(T0))[0]
    if node == m.RETRYING:
        return go(calling(), failure())[0]
    if node == m.Phase.TOOL_RUNNING:
        return go(calling(), calls_reply(("c1", "echo", "{}")))[0]
    if node == RunStatus.AWAITING_HUMAN:
        return go(calling(), calls_reply(("c1", "danger", "{}")))[0]
    if node == m.Phase.COMPACTING:
        return go(calling(), failure(kind="overflow", status=None))[0]
    if node == RunStatus.AWAITING_TOOLS:
        return go(calling(), calls_reply(("c1", "remote", "{}")))[0]
    if node == RunStatus.AWAITING_CHILDREN:
        return go(calling(), calls_reply(("c1", "helper", TASK)), m.ChildrenStarted(T0, {"c1": "stream-c1"}))[
            0
        ]
    if node == RunStatus.AWAITING_MODEL:
        return go(calling(), m.ModelDeferred(T0, "r1:0", None))[0]
    raise AssertionError(node)


TASK = '{"task": "look it up"}'


def child_result(call_id: str, content: str = "child says hi", is_error: bool = False) -> ToolResult:
    return ToolResult(tool_call_id=call_id, name="helper", content=content, is_error=is_error)


class Driver:
    """Answers every command the way the runner would, from scripted outcome lists."""

    def __init__(self, model: list[Any], tools: list[str]) -> None:
        self.model = list(model)
        self.tools = list(tools)
        self.terminal_emits = 0
        self.finishes = 0
        self.max_running = 0
        self.steps = 0

    def answer(self, s: m.RunState, cmd: m.Command) -> list[m.Event]:
        if isinstance(cmd, m.LoadContext):
            return [m.ContextLoaded(T0, [])]
        if isinstance(cmd, m.CallModel):
            out = self.model.pop(0) if self.model else "text"
            if out == "text":
                return [m.ModelStreamOpened(T0), text_reply()]
            if out == "json":  # a structured answer (responseFormat json_object)
                return [m.ModelStreamOpened(T0), text_reply('{"ok": true}')]
            if out == "calls":
                n = cmd.request.model_call_index
                return [
                    calls_reply(
                        (f"a{n}", "echo", "{}"),
                        (f"b{n}", "calc", '{"x": 1}'),
                        (f"c{n}", "nope", "{}"),
                        (f"d{n}", "echo", "not json"),
                    )
                ]
            if out == "danger":
                return [calls_reply((f"z{cmd.request.model_call_index}", "danger", "{}"))]
            if out == "remote":
                n = cmd.request.model_call_index
                return [
                    calls_reply((f"r{n}", "remote", "{}"), (f"e{n}", "echo", "{}"), (f"s{n}", "remote", "{}"))
                ]
            if out == "agents":  # two sub-agents and a tool in one reply
                n = cmd.request.model_call_index
                return [
                    calls_reply((f"g{n}", "helper", TASK), (f"e{n}", "echo", "{}"), (f"h{n}", "helper", TASK))
                ]
            if out == "partial":
                return [m.ModelStreamOpened(T0), failure(partial=True)]
            if out == "cut":  # the stream stopped without a finish_reason
                msg = Message(role="assistant", content="par")
                return [m.ModelStreamOpened(T0), m.ModelReplied(T0, msg, finish_reason=None, partial=True)]
            if out == "cut_calls":  # max tokens hit inside the arguments
                msg = Message(role="assistant", tool_calls=[ToolCall(id=f"t{cmd.request.model_call_index}",
                                                                     name="echo", arguments='{"te')])  # fmt: skip
                return [m.ModelReplied(T0, msg, finish_reason="length")]
            return [failure(kind={"retry": "http", "fatal": "http", "overflow": "overflow", "conn": "connection"}[out],
                            status={"retry": 503, "fatal": 401}.get(out))]  # fmt: skip
        if isinstance(cmd, m.Wait):
            return [m.RetryTimerFired(T0 + cmd.delay_ms)]
        if isinstance(cmd, m.ExecuteTool):
            content = self.tools.pop(0) if self.tools else "ok"
            return [
                m.ToolFinished(
                    T0,
                    ToolResult(
                        tool_call_id=cmd.call.id,
                        name=cmd.call.name,
                        content=content,
                        is_error=content != "ok",
                    ),
                )
            ]
        if isinstance(cmd, m.Compact):
            return [m.CompactionDone(T0, cmd.transcript[-cmd.keep_recent :], 1, cmd.reason)]
        if isinstance(cmd, m.AwaitClient):  # one result at a time: the run parks again in between
            c = cmd.pending[0]
            res = ToolResult(tool_call_id=c.id, name=c.name, content="from the client")
            return [m.Resumed(T0), m.ClientResultsReceived(T0, {c.id: res})]
        if isinstance(cmd, m.StartChildren):
            return [m.ChildrenStarted(T0, {c.id: f"stream-{c.id}" for c in cmd.calls})]
        if isinstance(cmd, m.AwaitChildren):  # one child ends at a time: the run parks again in between
            c = cmd.pending[0]
            return [m.Resumed(T0), m.ChildrenEnded(T0, {c.id: child_result(c.id)})]
        if isinstance(cmd, m.AwaitHuman):
            return [m.ApprovalsDecided(T0, {c.id: i % 2 == 0 for i, c in enumerate(cmd.pending)})]
        return []

    def run(self, s: m.RunState, max_steps: int) -> m.RunState:
        queue: list[m.Event] = (
            [m.Started(T0, s.cfg if s.config else config(), [Message(role="user", content="go")])]
            if s.phase == m.Phase.IDLE
            else []
        )
        while queue and self.steps < max_steps:
            ev = queue.pop(0)
            before = s.node
            s, cmds = m.decide(s, ev)
            self.steps += 1
            for c in cmds:
                if isinstance(c, m.ExecuteTool):
                    assert s.phase == m.Phase.TOOL_RUNNING, (before, s.node)
                if (
                    isinstance(c, m.Emit)
                    and c.kind == "status"
                    and c.payload["status"] in ("completed", "failed", "aborted")
                ):
                    self.terminal_emits += 1
                if isinstance(c, m.Finish):
                    self.finishes += 1
            self.max_running = max(self.max_running, len(s.running))
            for c in cmds:
                queue += self.answer(s, c)
        return s
