"""Property tests: for random model and tool outcomes the machine terminates within its limits,
emits consistent commands, and replays deterministically."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from agentmill_client.statuses import RunStatus
from tests.unit.machine_driver import T0, Driver, calling, calls_reply, config, go, in_node, result
from worker import machine as m

OUTCOMES = st.sampled_from(
    [
        "text",
        "calls",
        "danger",
        "remote",
        "agents",
        "retry",
        "fatal",
        "overflow",
        "conn",
        "partial",
        "cut",
        "cut_calls",
    ]
)
TOOL_OUTCOMES = st.sampled_from(["ok", "error: boom"])


@settings(max_examples=300, deadline=None)
@given(
    st.lists(OUTCOMES, max_size=40),
    st.lists(TOOL_OUTCOMES, max_size=60),
    st.integers(1, 6),
    st.integers(0, 3),
    st.integers(1, 3),
    st.sampled_from(["fail", "answer"]),
)
def test_random_runs_terminate_within_limits_with_consistent_commands(
    model: list[str], tools: list[str], max_iter: int, retries: int, parallel: int, on_limit: str
) -> None:
    cfg = config(
        max_iterations=max_iter,
        on_limit=on_limit,
        max_parallel=parallel,
        retry=config().retry.model_copy(update={"max_retries": retries}),
    )
    d = Driver(model, tools)
    bound = 20 * (max_iter + 1) * (retries + 2) * 6
    s = d.run(m.initial_state("r1").model_copy(update={"config": cfg}), bound)
    assert s.terminal, (s.node, d.steps)
    assert d.terminal_emits == 1 and d.finishes == 1  # exactly one terminal event, one Finish
    assert d.max_running <= parallel
    assert s.iterations <= max_iter + (on_limit == "answer")  # at most one last call for the answer
    if m.result_of(s).stop_reason:
        assert on_limit == "answer" and s.phase == RunStatus.COMPLETED
    for ev in (m.AbortRequested(T0), m.DeadlineReached(T0), m.ModelStreamOpened(T0)):
        assert m.decide(s, ev) == (s, [])  # terminal states absorb everything


@settings(max_examples=150, deadline=None)
@given(st.lists(OUTCOMES, max_size=20), st.lists(TOOL_OUTCOMES, max_size=30))
def test_a_recorded_event_sequence_replays_to_the_same_states(model: list[str], tools: list[str]) -> None:
    d = Driver(model, tools)
    recorded: list[m.Event] = []
    orig = m.decide

    def recording(s: m.RunState, e: m.Event) -> m.Decision:
        recorded.append(e)
        return orig(s, e)

    m.decide = recording  # type: ignore[assignment]
    try:
        first = d.run(m.initial_state("r1"), 2000)
    finally:
        m.decide = orig  # type: ignore[assignment]
    s = m.initial_state("r1")
    for e in recorded:
        s, _ = m.decide(s, e)
    assert s.model_dump_json() == first.model_dump_json()


def test_resumed_reissues_the_effects_of_each_node() -> None:
    expect = {
        m.Phase.PREPARING: m.LoadContext, m.CALLING: m.CallModel, m.STREAMING: m.CallModel, m.RETRYING: m.CallModel,
        m.Phase.TOOL_RUNNING: m.ExecuteTool, m.Phase.COMPACTING: m.Compact,
    }  # fmt: skip
    for node, cmd_type in expect.items():
        s, cmds = m.decide(in_node(node), m.Resumed(T0))
        assert [type(c) for c in cmds] == [cmd_type], node
    # In tool_running, only calls without a result are executed again.
    s, _ = go(
        calling(), calls_reply(("a", "echo", "{}"), ("b", "echo", "{}"), ("c", "echo", "{}")), result("a")
    )
    s, cmds = m.decide(s, m.Resumed(T0))
    assert [c.call.id for c in cmds if isinstance(c, m.ExecuteTool)] == ["b", "c"]
    assert m.decide(in_node(RunStatus.AWAITING_HUMAN), m.Resumed(T0))[1] == []


MACHINE = sorted(p.relative_to(Path(__file__).resolve().parents[2]).as_posix()
                 for p in (Path(__file__).resolve().parents[2] / "worker" / "machine").glob("*.py"))  # fmt: skip
PURE = MACHINE  # and worker/core/, the pure core beside it: tests/unit/test_layers.py
IO_MODULES = {"asyncio", "socket", "redis", "httpx", "arq", "time", "random", "os", "subprocess", "threading",
              "urllib", "requests", "aiohttp", "uuid", "datetime", "io", "pathlib", "select", "ssl"}  # fmt: skip


def test_the_machine_imports_nothing_that_does_io() -> None:
    root = Path(__file__).resolve().parents[2]
    for rel in PURE:
        tree = ast.parse((root / rel).read_text())
        for node in ast.walk(tree):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            for name in names:
                assert name.split(".")[0] not in IO_MODULES, f"{rel} imports {name}"
    # And importing them pulls in none of the I/O libraries transitively. (The stdlib `socket` module
    # does get imported, by pydantic via importlib.metadata -> email.utils; nothing here calls it.)
    code = "import sys; import worker.machine; print(sorted({m.split('.')[0] for m in sys.modules} & {'redis', 'httpx', 'arq', 'asyncio', 'anyio', 'uvloop'}))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=root, check=True
    ).stdout.strip()
    assert out == "[]", out


def test_the_runner_builds_no_event_of_its_own() -> None:
    # Every event a run publishes is built in worker/machine (transitions, or notices.py for the
    # events between checkpoints); the runner only stamps and publishes them.
    root = Path(__file__).resolve().parents[2]
    for path in sorted((root / "worker" / "runner").glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name | ast.Attribute):
                name = node.func.id if isinstance(node.func, ast.Name) else node.func.attr
                assert name not in {"Emit", "status_event", "error_event"}, f"{path.name} builds an event"
            if isinstance(node, ast.Dict):
                literal_keys = {k.value for k in node.keys if isinstance(k, ast.Constant)}
                assert not literal_keys & {"status", "modelCallIndex", "toolCallId"}, (
                    f"{path.name}:{node.lineno} builds an event payload"
                )
