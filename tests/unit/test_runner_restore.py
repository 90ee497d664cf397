"""A retry and a fork driven by a real RunDriver on in-memory ports: the run hash's origin (a
checkpoint, or events up to a seq) becomes the machine's Restored event; copied records are served
and nothing recorded is executed again."""

from __future__ import annotations

from typing import Any

import orjson

from shared import checkpoint
from shared.origin import Origin
from tests.unit.test_runner import World
from worker.core.preamble import unframe

SCRIPT: list[dict[str, Any]] = [
    {"toolCalls": [{"name": "echo", "arguments": {"text": "one"}}]},
    {"toolCalls": [{"name": "echo", "arguments": {"text": "two"}}]},
    {"error": {"status": 400, "message": "refused"}},
    {"echoContext": True},
]


def read(w: World) -> dict[str, Any] | None:
    """The run's checkpoint as a retry or fork reads it (shared.checkpoint, whatever the settings)."""
    return checkpoint.load(w.run.checkpoint, w.run.config, w.run.transcript)


def tool_contents(w: World) -> list[str]:
    seen = orjson.loads(w.result().final_assistant_message.content)["messages"]  # type: ignore[union-attr]
    return [unframe(m["content"]) for m in seen if m["role"] == "tool"]  # as the tools answered


async def test_a_retry_from_the_checkpoint_executes_nothing_recorded_and_a_fork_of_it_neither() -> None:
    original = World(SCRIPT, run_id="run-1")
    assert await original.driver()[0].run() == "failed"
    assert original.tools.executed == ["c1.0", "c2.0"]

    retry = World(SCRIPT, run_id="run-2")
    origin = Origin({"retryOf": "run-1"}, checkpoint=read(original))
    retry.run.origin = origin.to_json()
    retry.run.tools = dict(original.run.tools)
    assert await retry.driver()[0].run() == "completed"
    assert retry.tools.executed == []
    assert tool_contents(retry) == ["one", "two"]
    assert retry.run.payloads("status")[0] == {"status": "running", "agent": "t", "retryOf": "run-1"}
    assert [p["modelCallIndex"] for p in retry.run.payloads("assistant_message")] == [
        4
    ]  # c1..c3 were the original's

    # A fork of the retry at its first event: its events begin where its own origin put it.
    at = 1
    events = [(k, orjson.loads(p)) for s, k, _, p in retry.run.events if s <= at]
    fork = World(SCRIPT, run_id="run-3")
    fork.run.origin = Origin(
        {"forkOf": "run-2", "atSeq": at}, read(retry), events,
        [{"role": "user", "content": "and?"}], orjson.loads(retry.run.origin),
    ).to_json()  # fmt: skip
    assert await fork.driver()[0].run() == "completed"
    assert fork.tools.executed == [] and tool_contents(fork) == ["one", "two"]
    seen = orjson.loads(fork.result().final_assistant_message.content)["messages"]  # type: ignore[union-attr]
    assert seen[-1] == {"role": "user", "content": "and?"}


async def test_an_origin_the_worker_cannot_read_fails_the_run_with_the_reason() -> None:
    w = World(SCRIPT, run_id="run-9")
    w.run.origin = b'{"lineage": {}, "checkpoint": {"state": {"phase": 7}}}'
    assert await w.driver()[0].run() == "failed"
    assert w.result().last_error.code == "restore_failed"  # type: ignore[union-attr]
