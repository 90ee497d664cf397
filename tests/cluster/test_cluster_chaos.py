"""agentmill on a real Redis Cluster the test starts itself (three masters, three replicas): 200
runs (300 behind ``slow``) with tools and sessions spread over every master, a manual failover and a SIGKILLed master
during the load, and workers SIGKILLed at random and at failpoints (after a tool's side effect,
after a delta publish) so that runs resume on other workers through leases and the reconciler over
all 16 partitions. Every promise holds: no run lost, every stream seq 1..n, no recorded tool call
executed again, and the API and the workers keep serving."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.chaos.harness import Chaos, ChaosConfig

pytestmark = [
    pytest.mark.integration,
    pytest.mark.chaos,
    pytest.mark.timeout(420),
    pytest.mark.xdist_group("chaos"),  # not beside tests/chaos/test_chaos.py (see there)
    pytest.mark.skipif(shutil.which("redis-cli") is None, reason="redis-cli is needed to create a cluster"),
]


async def test_200_runs_on_a_cluster_through_a_failover_a_killed_master_and_killed_workers(
    tmp_path: Path,
) -> None:
    # 12 s of chaos: workers SIGKILLed from 2.5 s on, the failover at 4.8 s, the master killed at 8.4 s
    # and back as a replica when the chaos ends; the runs are still coming through all along.
    await _holds(200, 12.0, tmp_path)


@pytest.mark.slow
async def test_300_runs_through_twenty_seconds_of_the_same(tmp_path: Path) -> None:
    await _holds(300, 20.0, tmp_path)


async def _holds(runs: int, seconds: float, tmp_path: Path) -> None:
    cfg = ChaosConfig(
        runs=runs, steps=3, workers=3, seconds=seconds, lease_ms=3_000, kill_every_s=5.0,
        sigstop=False, sigterm=False, redis_restart=True, cluster=True, sessions=20,
        model_ms=(150, 400), tool_ms=(50, 150), finish_timeout_s=240.0,
    )  # fmt: skip
    report = await Chaos(cfg, tmp_path).run()
    print("\n" + report.table())
    assert report.violations() == []
    assert report.submitted == runs and report.lost == 0
    assert report.completed == runs, report.failed
    assert report.failovers == 1 and report.masters_killed == 1
    assert report.kills > 0 and report.recovery_s  # killed workers' runs resumed on the others
    assert len(report.runs_per_master) == 3 and min(report.runs_per_master.values()) > 30
    assert report.tool_executions >= report.completed * cfg.steps
    assert report.api_reads > 100 and report.api_failed_after_faults == 0
