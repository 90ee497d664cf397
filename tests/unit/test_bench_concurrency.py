"""The bench's figure 4 (bench/figures_concurrency.py): the default run measures the one-process rows
and a per-machine row (4m) on one process a core, each beside bare arq on as many processes with the
same share of slots; the pool sizing reads the one-process rows only. Nothing here starts a process."""

from __future__ import annotations

import os
from types import ModuleType
from typing import Any

import pytest

from tests.support.bench_modules import bench_modules


@pytest.fixture(scope="module")
def bench() -> tuple[ModuleType, ...]:
    return bench_modules("__main__", "figures_concurrency")


def test_the_default_run_has_a_row_per_machine_at_one_process_a_core(bench: Any) -> None:
    main, conc = bench
    args = main.parser().parse_args([])
    assert "concurrency" in args.only
    assert args.machine_processes == conc.machine_cores() == len(os.sched_getaffinity(0))
    assert args.machine_inflight == [1000, 2000] and {1000, 2000} <= set(args.inflight)
    assert not args.machine_cold
    b = main.Bench(main.parser().parse_args(["--machine-processes", "2"]))
    assert b.warm(2) and not b.warm(1)  # 4m starts its processes before the clock, 4 does not
    assert not main.Bench(main.parser().parse_args(["--machine-cold"])).warm(2)


def test_each_process_has_its_share_of_slots_and_one_process_all(bench: Any) -> None:
    _, conc = bench
    assert conc.slots(1000, 1) == 1010
    assert conc.slots(1000, 2) == 510
    assert conc.slots(1001, 2) == 511
    assert conc.slots(1000, 3) * 3 >= 1000


def test_a_process_that_held_no_run_shows_as_zero(bench: Any) -> None:
    _, conc = bench
    w = conc.ProcessWatch()
    w.peak = {b"a": 60}
    assert w.peaks(2) == "60/0"
    w.peak = {b"a": 490, b"b": 510}
    assert w.peaks(2) == "510/490"


def test_the_pool_sizing_reads_the_one_process_rows_only(bench: Any) -> None:
    from bench.report import Sizing

    def row(name: str, ratio: float, k: int) -> dict[str, Any]:
        return {
            "figure": name,
            "ours": {"samples": [ratio * 1000]},
            "ratio": ratio,
            "extra": {"in_flight": 1000.0, "processes": float(k), "worker_kb_per_run": 40.0},
        }

    data = {
        "figures": [
            row("4. 1000 runs in flight, model latency 1 s", 0.8, 1),
            row("4m. 1000 runs in flight, model latency 1 s, 2 worker processes", 0.9, 2),
        ]
    }
    assert Sizing.of(data).of_ideal == 0.8
