"""``AGENTMILL_MODEL_COMMIT``: a step whose one effect is a model call sends its commit and starts the
call without waiting for the commit's reply (``behind``), or waits for it first (``awaited``). Here
the store answers each commit a while after applying it, as Redis does after a round trip, and the
log says in which order the commits went out, came back, and the model was asked."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import Any

import pytest

from shared.settings import Settings
from tests.unit.test_runner import World, started, until
from tests.unit.test_runner_budgets import Budgets
from worker.adapters.memory_store import MemoryModels, MemoryRunStore
from worker.core.acquisition import Acquired
from worker.core.commit_step import CommitStep
from worker.machine import ModelRequest
from worker.models.base import Chunk, ModelProvider
from worker.models.scripted import ScriptedProvider
from worker.ports import BudgetHold
from worker.runner import RunDriver, RunPorts

REPLY_S = 0.03  # a commit's round trip


class Lagging(MemoryRunStore):
    """Each commit is applied when it is sent and answered ``REPLY_S`` later (``fence_first``: the
    first one refused then, as when another worker took the run meanwhile). Its acquisitions leave
    the opening event to the run's first step, as for a retry or a fork: a start commit."""

    opens = False

    def __init__(self, w: World, log: list[str], fence_first: bool = False) -> None:
        super().__init__(w.run, w.sessions)
        self.log, self.fence_first, self.sent = log, fence_first, 0

    async def commit(self, step: CommitStep) -> int:
        self.sent += 1
        n = self.sent
        self.log.append(f"commit {n} sent")
        if n == 1 and self.fence_first:
            await asyncio.sleep(REPLY_S)
            self.log.append("commit 1 refused")
            return await super().commit(step)  # the run's epoch moved on: FencedError
        seq = await super().commit(step)
        await asyncio.sleep(REPLY_S)
        self.log.append(f"commit {n} replied")
        return seq


class Asked(ModelProvider):
    """The scripted provider, noting when it is asked and whether its stream was cut off."""

    def __init__(self, inner: ScriptedProvider, log: list[str]) -> None:
        self.inner, self.log = inner, log

    async def aclose(self) -> None:
        return None

    async def stream(self, request: ModelRequest, hints: dict[str, Any]) -> AsyncGenerator[Chunk, None]:
        self.log.append("model asked")
        try:
            async for chunk in self.inner.stream(request, hints):
                yield chunk
        except asyncio.CancelledError:
            self.log.append("model cancelled")
            raise


class Booked(Budgets):
    """A tenant's day budget (tests/unit/test_runner_budgets.py), noting when a call holds it."""

    def __init__(self, log: list[str]) -> None:
        super().__init__(limit=10**9)
        self.log = log

    async def reserve(
        self, tenant: str, hold_id: str, tokens: int, cost_usd: float | None
    ) -> BudgetHold | str:
        self.log.append("budget held")
        return await super().reserve(tenant, hold_id, tokens, cost_usd)


def driver(
    w: World, log: list[str], fence_first: bool = False, budgets: Budgets | None = None
) -> tuple[RunDriver, Lagging]:
    w.models = MemoryModels(lambda p: Asked(ScriptedProvider(p.provider), log))
    store = Lagging(w, log, fence_first)
    ports = RunPorts(store, w.sessions, w.models, w.tools, rng=w.rng)
    if budgets is not None:
        ports = RunPorts(store, w.sessions, w.models, w.tools, rng=w.rng, budgets=budgets)
    return RunDriver(w.host, ports, w.run.run_id, gen=1), store


BEHIND = Settings(model_commit="behind")  # not the default: see docs/settings.md


async def test_behind_the_model_is_asked_before_the_start_commit_is_answered() -> None:
    log: list[str] = []
    w = World([{"text": "ok"}], settings=BEHIND)
    d, _ = driver(w, log)
    assert await d.run() == "completed"
    # one round trip less before the model call: the start commit's reply comes while it streams
    assert log[:3] == ["commit 1 sent", "model asked", "commit 1 replied"]
    assert log[3:] == ["commit 2 sent", "commit 2 replied"]  # the next commit after it, never beside it
    assert w.run.kinds() == ["status", "model_delta", "assistant_message", "usage", "status"]


async def test_awaited_the_model_is_asked_after_the_start_commit_is_answered() -> None:
    log: list[str] = []
    w = World([{"text": "ok"}], settings=Settings(model_commit="awaited"))
    d, _ = driver(w, log)
    assert await d.run() == "completed"
    assert log == ["commit 1 sent", "commit 1 replied", "model asked", "commit 2 sent", "commit 2 replied"]


@pytest.mark.parametrize("delay_ms", [0, 500])  # the model answers before the refusal, or after it
async def test_a_start_commit_refused_behind_stops_the_run_before_any_tool_or_write(delay_ms: int) -> None:
    log: list[str] = []
    w = World(
        [{"toolCalls": [{"id": "c1", "name": "echo", "arguments": {"text": "hi"}}], "delayMs": delay_ms}],
        settings=BEHIND,
    )
    d, _ = driver(w, log, fence_first=True)
    job = started(d.run())
    await until(lambda: "commit 1 sent" in log)
    _, newer = w.driver()
    assert isinstance(await newer.acquire(2, "other-worker"), Acquired)  # another worker takes the run
    assert await asyncio.wait_for(job, 0.4) == "fenced"  # not after the 500 ms call
    assert w.tools.executed == [] and w.run.tools == {}
    assert [(seq, k) for seq, k, _, _ in w.run.events] == [(1, "status")]  # the other's opening, none of its
    assert w.observer.refused == ["fenced"]
    assert "commit 2 sent" not in log  # nothing written after the refusal
    assert log[:3] == ["commit 1 sent", "model asked", "commit 1 refused"]
    if delay_ms:
        assert "model cancelled" in log and not d.tasks  # the call cut off unanswered


async def test_a_tool_round_behind_runs_its_tools_only_after_the_start_commit_is_answered() -> None:
    log: list[str] = []
    w = World(
        [{"toolCalls": [{"id": "c1", "name": "echo", "arguments": {"text": "hi"}}]}, {"text": "fin"}],
        settings=BEHIND,
    )
    d, _ = driver(w, log)
    assert await d.run() == "completed"
    assert w.tools.executed == ["c1.0"]
    assert log.index("commit 1 replied") < log.index("commit 2 sent")  # the reply's commit, with its claim
    seqs = [s for s, _, _, _ in w.run.events]
    assert seqs == list(range(1, len(seqs) + 1))  # one stream, no gaps, no repeats


async def test_a_call_on_a_tenant_budget_holds_it_only_after_the_start_commit_is_answered() -> None:
    log: list[str] = []
    w = World([{"text": "ok"}], settings=BEHIND)
    d, _ = driver(w, log, budgets=Booked(log))
    assert await d.run() == "completed"
    assert log[:4] == ["commit 1 sent", "commit 1 replied", "budget held", "model asked"]
