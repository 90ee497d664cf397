"""The effect runner on in-memory ports (worker/adapters/memory_store.py): no Redis, no sockets, no processes.

Each test drives a real RunDriver with the scripted model and the builtin tools; what the run wrote
is read back from the MemoryRun, as a reader would read the stream and the run hash.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
import pytest

from agentmill_client.models import RunInput, RunResult, RunStatus
from shared import checkpoint
from shared.profiles import AgentProfile, RetryConfig
from shared.settings import Settings
from worker.adapters.lease import WorkerLease
from worker.adapters.memory_store import (
    MemoryHost,
    MemoryModels,
    MemoryRun,
    MemoryRunStore,
    MemorySessionStore,
    MemoryTools,
)
from worker.core.acquisition import Acquired
from worker.core.preamble import frame
from worker.machine import Phase, RunState
from worker.models.scripted import ScriptedProvider
from worker.runner import RunDriver, RunPorts
from worker.telemetry.observer import NullObserver

PROFILE = AgentProfile(
    name="t",
    tools=["echo", "sleep"],
    retry=RetryConfig(max_retries=2, base_delay_ms=1, max_delay_ms=1, jitter=0.0),
)


class HalfRng:
    def __init__(self) -> None:
        self.draws = 0

    def random(self) -> float:
        self.draws += 1
        return 0.5


class Counting(NullObserver):
    def __init__(self) -> None:
        self.served: list[str] = []
        self.refused: list[str] = []
        self.redispatched: list[str] = []

    def tool_served_from_record(self, tool: str) -> None:
        self.served.append(tool)

    def append_refused(self, reason: str) -> None:
        self.refused.append(reason)

    def runs_redispatched(self, reason: str, count: int = 1) -> None:
        self.redispatched += [reason] * count


class World:
    """One run in memory and the ports of the workers that drive it."""

    def __init__(
        self,
        script: list[dict[str, Any]],
        run_id: str = "run-1",
        agent: str = "t",
        profile: AgentProfile = PROFILE,
        settings: Settings | None = None,
    ) -> None:
        run_input = RunInput.model_validate({"agent": agent, "inputMessages": [{"role": "user", "content": "go"}],
                                             "runtimeHints": {"script": script}})  # fmt: skip
        self.run = MemoryRun.submitted(run_id, run_input)
        self.sessions = MemorySessionStore()
        self.sessions.runs[run_id] = self.run
        self.models = MemoryModels(lambda p: ScriptedProvider(p.provider))
        self.tools = MemoryTools()
        self.rng = HalfRng()
        self.observer = Counting()
        self.host = MemoryHost({"t": profile}, settings=settings or Settings(), observer=self.observer)

    def driver(self) -> tuple[RunDriver, MemoryRunStore]:
        store = MemoryRunStore(self.run, self.sessions)
        ports = RunPorts(store, self.sessions, self.models, self.tools, rng=self.rng)
        return RunDriver(self.host, ports, self.run.run_id, gen=1), store

    def result(self) -> RunResult:
        return RunResult.model_validate_json(self.run.result)


async def until(cond: Callable[[], bool], timeout: float = 2.0) -> None:
    t0 = time.monotonic()
    while not cond():
        assert time.monotonic() - t0 < timeout, "timed out waiting"
        await asyncio.sleep(0.001)


def started(coro: Awaitable[str]) -> asyncio.Task[str]:
    return asyncio.ensure_future(coro)


async def test_a_run_with_a_tool_round_completes_and_commits_each_step() -> None:
    w = World(
        [{"toolCalls": [{"id": "c1", "name": "echo", "arguments": {"text": "hi"}}]}, {"text": "all done"}]
    )
    driver, _ = w.driver()
    assert await driver.run() == "completed"
    assert w.run.status == "completed" and w.tools.executed == ["c1.0"]
    result = w.result()
    assert result.final_assistant_message is not None and result.final_assistant_message.content == "all done"
    assert result.iterations == 2
    assert w.run.kinds() == ["status", "model_delta", "assistant_message", "usage", "tool_call", "tool_result",
                             "model_delta", "assistant_message", "usage", "status"]  # fmt: skip
    assert w.run.payloads("status") == [
        {"status": "running", "agent": "t"},
        {"status": "completed", "iterations": 2, "finishReason": "stop"},
    ]
    assert w.run.payloads("tool_result")[0]["content"] == "hi"
    assert w.run.tools["c1.0"]["state"] == "done"
    seqs = [s for s, _, _, _ in w.run.events]
    assert seqs == list(range(1, len(seqs) + 1))  # one stream, no gaps, no repeats
    # as its readers load it (shared.checkpoint: with the configuration and transcript put back
    # when the settings keep them apart, AGENTMILL_CHECKPOINT_CONFIG and _TRANSCRIPT)
    ck = checkpoint.load(w.run.checkpoint, w.run.config, w.run.transcript) or {}
    assert ck["seq"] == len(seqs) and ck["state"]["phase"] == "completed"
    # The config is serialised once per run and spliced in: the checkpoint is the whole state (its
    # fields at their defaults left out, put back by loading it).
    assert RunState.model_validate(ck["state"]) == driver.state
    assert ck["state"]["config"]["tools"][0]["name"] == "echo"


async def test_a_reply_whose_end_comes_with_its_last_delta_publishes_both_in_one_commit() -> None:
    w = World([{"text": "ok", "delayMs": 60}])  # one chunk, then the end, in the same turn
    driver, store = w.driver()
    assert await driver.run() == "completed"
    assert w.run.kinds() == ["status", "model_delta", "assistant_message", "usage", "status"]
    assert store.commits == 1  # the delta, the reply and the end together (the acquisition opened it)


async def test_the_deltas_of_a_slow_stream_are_published_while_it_streams() -> None:
    w = World([{"text": "x" * 40, "delayMs": 400}])  # five chunks, 80 ms apart
    driver, store = w.driver()
    task = started(driver.run())
    await until(lambda: "model_delta" in w.run.kinds())
    assert "assistant_message" not in w.run.kinds()  # readers see text before the reply ends
    assert await task == "completed"
    deltas = [p["text"] for p in w.run.payloads("model_delta")]
    assert "".join(deltas) == "x" * 40 and len(deltas) >= 3
    assert store.commits == 1 + len(deltas) - 1  # the last delta goes with the reply


async def test_a_failed_model_call_is_retried_with_the_drawn_jitter() -> None:
    w = World([{"error": {"status": 503, "message": "busy"}}, {"text": "ok"}])
    driver, _ = w.driver()
    assert await driver.run() == "completed"
    errors = w.run.payloads("error")
    assert [(e["scope"], e["code"], e["retryable"]) for e in errors] == [("model", "model_http_503", True)]
    retrying = [s for s in w.run.payloads("status") if s["status"] == "retrying"]
    assert [(r["attempt"], r["delayMs"]) for r in retrying] == [(1, 1)]
    assert w.rng.draws == 2  # one draw per model call outcome, from the Rng port
    assert w.result().final_assistant_message.content == "ok"  # type: ignore[union-attr]


async def test_a_tool_call_with_a_recorded_result_is_served_not_executed() -> None:
    w = World([{"toolCalls": [{"id": "c1", "name": "sleep", "arguments": {"ms": 10_000}}]}, {"text": "fin"}])
    first, _ = w.driver()
    job = started(first.run())
    await until(lambda: w.run.tools.get("c1.0", {}).get("state") == "pending")  # claimed, executing
    job.cancel()  # the worker stops mid-call…
    await asyncio.gather(job, return_exceptions=True)
    recorded = {"toolCallId": "c1.0", "name": "sleep", "content": "slept (recorded)", "isError": False}
    w.run.tools["c1.0"] = {"state": "done", "epoch": 1, "attempts": 1, "result": recorded}  # …after recording
    second, _ = w.driver()
    assert await second.run() == "completed"
    assert w.tools.executed == ["c1.0"]  # only the first worker's attempt: the record was served
    assert w.observer.served == ["sleep"]
    assert w.run.payloads("tool_result")[-1]["content"] == "slept (recorded)"


def echo_call(text: str, provider_id: str = "call_0") -> dict[str, Any]:
    return {"id": provider_id, "name": "echo", "arguments": {"text": text}}


async def test_a_model_that_reuses_call_ids_gets_every_call_run_and_answered_once() -> None:
    """Servers that count from call_0 in every reply, or repeat an id inside one: each call is
    agentmill's own (model-call index, position), runs once and gets its own result."""
    w = World([{"toolCalls": [echo_call("one")]},
               {"toolCalls": [echo_call("two"), echo_call("three")]},  # the same id twice in one reply
               {"echoContext": True}])  # fmt: skip
    driver, _ = w.driver()
    assert await driver.run() == "completed"
    assert w.tools.executed == ["c1.0", "c2.0", "c2.1"]
    assert {i: (r["state"], r["attempts"], r["result"]["content"]) for i, r in w.run.tools.items()} == {
        "c1.0": ("done", 1, "one"), "c2.0": ("done", 1, "two"), "c2.1": ("done", 1, "three")}  # fmt: skip
    seen = orjson.loads(w.result().final_assistant_message.content)["messages"]  # type: ignore[union-attr]
    calls = [c for m in seen if m["role"] == "assistant" for c in m.get("toolCalls", [])]
    answers = [(m["toolCallId"], m["content"]) for m in seen if m["role"] == "tool"]
    assert [c["id"] for c in calls] == ["c1.0", "c2.0", "c2.1"]
    assert answers == [
        ("c1.0", frame("one", "echo")),
        ("c2.0", frame("two", "echo")),
        ("c2.1", frame("three", "echo")),
    ]  # each call answered once
    wire = [c["providerId"] for c in calls]
    assert wire[0] == "call_0" and len(set(wire)) == 3  # unique on the wire too
    events = [(p["toolCallId"], p["providerCallId"]) for p in w.run.payloads("tool_call")]
    assert events == list(zip(["c1.0", "c2.0", "c2.1"], wire, strict=True))


async def test_a_resumed_round_never_serves_an_earlier_rounds_record_for_a_reused_id() -> None:
    """The worker dies mid-call in round 2 of a model that says call_0 every time: round 1's
    recorded call is not run again, and round 2's call is not served round 1's result."""
    w = World([{"toolCalls": [echo_call("first")]},
               {"toolCalls": [{"id": "call_0", "name": "sleep", "arguments": {"ms": 10_000}}]},
               {"text": "fin"}])  # fmt: skip
    first, _ = w.driver()
    job = started(first.run())
    await until(lambda: w.run.tools.get("c2.0", {}).get("state") == "pending")
    job.cancel()
    await asyncio.gather(job, return_exceptions=True)
    w.tools.executed.clear()
    second, _ = w.driver()
    job = started(second.run())
    await until(lambda: w.tools.executed == ["c2.0"])  # run again (same key), never c1.0
    second.request_abort("enough")
    await asyncio.gather(job, return_exceptions=True)
    assert w.run.tools["c1.0"]["result"]["content"] == "first"
    assert [p["toolCallId"] for p in w.run.payloads("tool_result")] == ["c1.0"]  # c2.0 not served c1.0's


async def test_abort_during_a_model_call_ends_the_run_at_once() -> None:
    w = World([{"stall": True}])
    driver, _ = w.driver()
    job = started(driver.run())
    await until(lambda: driver.state.node == "model_running.calling" and bool(driver.tasks))
    t0 = time.monotonic()
    driver.request_abort("stop it")
    assert await job == "aborted"
    assert time.monotonic() - t0 < 0.5  # the stalled call was cancelled, not waited for
    assert w.run.status == "aborted" and not driver.tasks
    err = w.result().last_error
    assert err is not None and (err.code, err.message) == ("aborted", "stop it")


async def test_a_worker_whose_run_was_taken_over_is_fenced_and_writes_nothing() -> None:
    w = World([{"toolCalls": [{"id": "c1", "name": "sleep", "arguments": {"ms": 30}}]}, {"text": "fin"}])
    old, _ = w.driver()
    job = started(old.run())
    await until(lambda: "c1.0" in w.run.tools)
    _, newer = w.driver()
    assert isinstance(await newer.acquire(2, "other-worker"), Acquired)  # another worker takes the run
    written = len(w.run.events)
    assert await job == "fenced"  # its ToolFinished commit was refused
    assert len(w.run.events) == written and w.run.tools["c1.0"]["state"] == "pending"
    assert w.observer.refused == ["fenced"]
    assert old.state.phase == Phase.MODEL_RUNNING  # its own step went on; the store never saw it


async def test_a_run_whose_acknowledged_write_was_lost_is_handed_back_not_left_to_its_lease() -> None:
    # A failover lost a commit the worker saw acknowledged: Redis's stream ends before the worker's.
    w = World([{"toolCalls": [{"id": "c1", "name": "sleep", "arguments": {"ms": 30}}]}, {"text": "fin"}])
    driver, store = w.driver()
    job = started(driver.run())
    await until(lambda: "c1.0" in w.run.tools)
    del w.run.events[-1]  # the last commit's last event, gone with the old master
    assert await job == "fenced"  # its next commit is refused (seq conflict) and it writes nothing
    assert w.observer.refused == ["duplicate"]
    assert w.run.status == RunStatus.QUEUED.value  # handed back at once: another worker resumes it
    assert store.epoch == w.run.epoch  # it still held the run when it gave it back


async def test_a_run_stopped_on_its_workers_passed_lease_deadline_hands_itself_back() -> None:
    """Past the worker's lease deadline the run starts nothing and writes nothing; it goes back on
    the queue at once (a lost attempt), not when the lease keeper or a sweep gets to it."""
    w = World([{"toolCalls": [{"id": "c1", "name": "sleep", "arguments": {"ms": 30}}]}, {"text": "fin"}])
    now = [0.0]
    w.host.lease = WorkerLease(3000, 300, clock=lambda: now[0])
    w.host.lease.renewed(0.0)
    driver, store = w.driver()
    job = started(driver.run())
    await until(lambda: "c1.0" in w.run.tools)
    now[0] = 10.0  # the deadline passes while the tool runs: its result's step starts no model call
    assert await job == "fenced"
    assert w.run.status == RunStatus.QUEUED.value and w.run.owner == ""  # back on the queue now
    assert (w.run.restarts, store.epoch) == (1, w.run.epoch)
    assert w.observer.redispatched == ["lease_expired"]  # as the sweep counts a lapsed lease's run


async def test_a_run_whose_job_fails_is_handed_back_not_left_running_under_a_live_lease(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An error the driver does not expect (a store call that fails past its retries, a bug) fails
    the job; the run goes back as a lost attempt, so the crash budget ends a run that always fails."""
    w = World([{"toolCalls": [{"id": "c1", "name": "sleep", "arguments": {"ms": 30}}]}, {"text": "fin"}])
    driver, store = w.driver()
    real = store.commit

    async def failing(step: Any) -> int:
        if "c1.0" in w.run.tools:
            raise ConnectionError("the store went away")
        return await real(step)

    monkeypatch.setattr(store, "commit", failing)
    with pytest.raises(ConnectionError):
        await driver.run()
    assert w.run.status == RunStatus.QUEUED.value and w.run.owner == ""
    assert w.run.restarts == 1 and w.observer.redispatched == ["lease_expired"]


async def test_a_configuration_rejected_before_start_fails_the_run_through_the_machine() -> None:
    w = World([], agent="nobody")
    driver, _ = w.driver()
    assert await driver.run() == "failed"
    err = w.result().last_error
    assert err is not None and err.code == "configuration" and "nobody" in err.message
    assert w.run.payloads("error") == [
        {"scope": "run", "code": "configuration", "message": err.message, "retryable": False}
    ]
    assert w.run.payloads("status")[-1]["status"] == "failed" and w.models.holds == 0


async def test_a_run_left_with_nothing_running_is_handed_back_at_its_checkpoint(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """An effect that ends without posting its outcome leaves the loop waiting on nothing: after
    ``stall_s`` the run is released at its checkpoint (as a drain would), and the next worker resumes
    it from there to its end."""
    import worker.runner.driver as driver_mod

    real = driver_mod.start_effect
    lost = []

    def losing(cx: Any, state: Any, c: Any) -> Any:
        started = real(cx, state, c)
        if type(c).__name__ == "ExecuteTool" and not lost:  # the first tool call: its outcome never comes
            started.close()
            lost.append(c.call.id)

            async def nothing() -> None:
                return None

            return nothing()
        return started

    w = World([{"toolCalls": [{"id": "c1", "name": "echo", "arguments": {"text": "hi"}}]}, {"text": "done"}])
    monkeypatch.setattr(driver_mod, "start_effect", losing)
    driver, _ = w.driver()
    driver.stall_s = 0.2
    with caplog.at_level("ERROR", logger="agentmill.runner"):
        assert await asyncio.wait_for(driver.run(), 5.0) == "released"
    assert lost == ["c1.0"] and w.run.status == "queued"
    assert any("nothing running and nothing to do" in r.getMessage() for r in caplog.records)
    monkeypatch.setattr(driver_mod, "start_effect", real)
    again, _ = w.driver()
    assert await again.run() == "completed"
    assert w.tools.executed == ["c1.0"]  # claimed, never recorded: run once, by the next attempt
