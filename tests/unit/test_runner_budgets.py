"""The runner around a tenant's day budget (worker/ports.py BudgetPort), in memory: each model call
holds its worst case first and settles its actual usage after; a refused hold ends the run
budget_exceeded before the call is made."""

from __future__ import annotations

from dataclasses import dataclass, field

from tests.unit.test_runner import World
from worker.core.commit_step import Settlement
from worker.ports import BudgetHold
from worker.runner import RunDriver, RunPorts


@dataclass
class Hold:
    book: Budgets
    tokens: int
    slot: int = -2  # not the memory store's: settled by the hold itself, not with a commit

    def settlement(self, tokens: int, cost_usd: float | None) -> Settlement:
        raise AssertionError("a settlement goes with a commit only in the run's slot")

    async def settle(self, tokens: int, cost_usd: float | None) -> None:
        self.book.held -= self.tokens
        self.book.spent += tokens
        self.book.settled.append(tokens)


@dataclass
class Budgets:
    limit: int
    spent: int = 0
    held: int = 0
    settled: list[int] = field(default_factory=list)
    asked: list[int] = field(default_factory=list)

    def limited(self, tenant: str) -> bool:
        return True

    async def reserve(
        self, tenant: str, hold_id: str, tokens: int, cost_usd: float | None
    ) -> BudgetHold | str:
        self.asked.append(tokens)
        if self.spent + self.held + tokens > self.limit:
            return f"tenant budget: spent {self.spent}, held {self.held}, this call {tokens} > {self.limit}"
        self.held += tokens
        return Hold(self, tokens)


def driver(w: World, budgets: Budgets) -> RunDriver:
    from worker.adapters.memory_store import MemoryRunStore

    store = MemoryRunStore(w.run, w.sessions)
    ports = RunPorts(store, w.sessions, w.models, w.tools, rng=w.rng, budgets=budgets)
    return RunDriver(w.host, ports, w.run.run_id, gen=1)


STEPS = [{"toolCalls": [{"name": "echo", "arguments": {"text": "hi"}}]}] * 3 + [{"text": "done"}]


async def test_each_call_holds_its_worst_case_and_settles_its_usage() -> None:
    w = World(STEPS)
    book = Budgets(limit=10**9)
    assert await driver(w, book).run() == "completed"
    per_call = [p["usage"]["inputTokens"] + p["usage"]["outputTokens"] for p in w.run.payloads("usage")]
    assert book.settled == per_call and book.held == 0
    assert all(a >= u for a, u in zip(book.asked, per_call, strict=True))  # each within its hold


async def test_a_refused_hold_ends_the_run_before_its_call() -> None:
    w = World(STEPS)
    first = Budgets(limit=10**9)
    await driver(World(STEPS), first).run()
    book = Budgets(limit=first.settled[0] + first.asked[1] - 1)  # the second call's hold does not fit
    assert await driver(w, book).run() == "failed"
    result = w.result()
    assert result.last_error is not None and result.last_error.code == "budget_exceeded"
    assert "this call" in result.last_error.message
    assert len(w.run.payloads("assistant_message")) == 1 and len(book.settled) == 1  # no second call
    assert w.run.tools and all(t["state"] == "done" for t in w.run.tools.values())  # no call in flight
