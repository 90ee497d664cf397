"""The chaos run: a short one in the suite, the size it had before behind ``slow`` (``bin/dev test -m
slow``), a longer one from the harness (``python -m tests.chaos.harness``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos.harness import Chaos, ChaosConfig
from tests.support.sampled_bounds import median_over_bound, over_bound

# One xdist worker runs the chaos runs one after the other (bin/dev test: --dist loadgroup): side by
# side on 2 cores (load 4) restarted workers took longer to start than the kill interval, and the
# per-kill recovery bound failed in about one run of four.
pytestmark = [
    pytest.mark.integration,
    pytest.mark.chaos,
    pytest.mark.timeout(300),
    pytest.mark.xdist_group("chaos"),
]


async def test_no_run_lost_no_duplicate_event_no_recorded_tool_call_twice(tmp_path: Path) -> None:
    # Runs of 20 steps at ~0.65 s a step outlast the 12 s of chaos, so every fault lands mid-run:
    # three SIGKILLs or more (one every 1.25 to 3.75 s), a SIGSTOP past the lease, a SIGTERM, a Redis
    # restart, and the failpoints' deaths.
    cfg = ChaosConfig(
        runs=16, steps=20, workers=3, seconds=12.0, lease_ms=2_000, kill_every_s=2.5, finish_timeout_s=150.0
    )
    await _holds(cfg, tmp_path)


@pytest.mark.slow
async def test_the_same_with_more_and_longer_runs_through_twenty_seconds_of_chaos(tmp_path: Path) -> None:
    cfg = ChaosConfig(
        runs=24, steps=24, workers=3, seconds=20.0, lease_ms=2_000, kill_every_s=2.5, finish_timeout_s=150.0
    )
    await _holds(cfg, tmp_path)


async def _holds(cfg: ChaosConfig, tmp_path: Path) -> None:
    report = await Chaos(cfg, tmp_path).run()
    print("\n" + report.table())
    assert report.violations() == []
    assert report.lost == 0
    assert report.completed + sum(report.failed.values()) == report.submitted == cfg.runs
    assert report.kills >= 3 and report.sigstops == 1 and report.sigterms == 1 and report.redis_restarts == 1
    # Every step's tool call reached the ledger at least once.
    assert report.tool_executions >= report.completed * cfg.steps
    # Runs of a killed worker move on within lease + sweep + poll + start (typically; the exact bound
    # is test_recovery's). The runs of one kill recover together, so the check takes one figure per
    # kill (the median of its runs): a run can land on the next victim before it publishes (its
    # "recovery" then spans two kills), and a worker starting on a loaded machine takes seconds, so
    # the median kill gets two seconds of slack and only the tail a loose bound: a run stuck behind
    # arq's in-progress key (the job timeout: days) would still blow through it, one caught only by
    # the queued check (3 s here) would come close. The report prints the load average at the kills:
    # CI once saw 5.2 s for the median run, on a machine busy with other work.
    # A figure of fewer than three kills is only reported (tests/support/sampled_bounds.py): one kill's
    # figure on a loaded machine measures the load (12.9 s was seen with every guarantee above held).
    # A run stuck for good fails the hard checks above (every run ends within finish_timeout_s).
    kills = len(report.recovery_by_kill_s)
    for failure, figure in (
        median_over_bound("recovery per SIGKILL", report.recovery_by_kill_s, cfg.lease_ms / 1000.0 + 4.0),
        over_bound("recovery of the slowest run", max(report.recovery_s, default=None), kills, 30.0),
    ):
        print(figure)
        assert failure is None, f"{failure}\n{report.table()}"
