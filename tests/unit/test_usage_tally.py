"""A run's usage tally (worker/runner/tally.py): what its terminal commit adds to its tenant's day."""

from __future__ import annotations

import pytest

from agentmill_client.models import RunResult, Usage
from agentmill_client.statuses import RunStatus
from shared import fields
from tests.unit.machine_driver import config
from worker.machine import initial_state
from worker.runner import tally
from worker.runner.tally import usage_tally

DAY_MS = 1_764_374_400_000  # 2025-11-29 00:00 UTC


def _tally(
    lane: str = "standard", economy: Usage | None = None, usage: Usage | None = None
) -> list[tuple[str, int]]:
    state = initial_state("r1").model_copy(update={"config": config(lane=lane), "economy_usage": economy})
    result = RunResult(run_id="r1", status=RunStatus.COMPLETED, usage=usage)
    got = usage_tally(state, result, "t1", DAY_MS + 5, 7)
    assert got is not None and got.tenant == "t1" and got.day == "2025-11-29" and got.ttl_s == 7 * 86_400
    return got.increments


def test_a_run_adds_what_it_used_and_one_run_last() -> None:
    a = config().agent
    used = Usage(input_tokens=3, output_tokens=4, cost_usd=0.5, cache_read_tokens=2)
    assert _tally(usage=used) == [(f"{a}|in", 3), (f"{a}|out", 4), (f"{a}|cost", 500_000_000),
                                  (f"{a}|cr", 2), (f"{a}|runs", 1)]  # fmt: skip
    assert _tally() == [(f"{a}|runs", 1)]  # nothing used: only the run


def test_the_economy_lanes_terms_come_just_before_the_run() -> None:
    a = config().agent
    got = _tally("economy", Usage(input_tokens=5, cost_usd=1e-9), Usage(input_tokens=5))
    assert got == [(f"{a}|in", 5), (f"{a}|e.in", 5), (f"{a}|e.cost", 1), (f"{a}|e.runs", 1), (f"{a}|runs", 1)]
    assert _tally("economy") == [(f"{a}|e.runs", 1), (f"{a}|runs", 1)]  # no call answered by a batch


def test_the_fields_are_the_agents_named_once_per_agent(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every run's ending tallies: its fields' names are its agent's, not built again per run."""
    _tally()
    named: list[str] = []
    monkeypatch.setattr(tally, "usage_field", lambda a, w: named.append(a) or fields.usage_field(a, w))
    _tally(usage=Usage(input_tokens=1))
    assert named == []
