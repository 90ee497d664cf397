"""The bench's peers figure (bench/figures_peers.py): its arguments, the durability pairing, the
skip of a peer whose package is missing and the side-by-side table. Nothing here runs a peer."""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

import pytest

from tests.support.bench_modules import bench_modules


@pytest.fixture(scope="module")
def bench() -> tuple[ModuleType, ...]:
    return bench_modules("__main__", "figures_peers")


def test_peers_is_a_figure_of_the_default_run_with_every_peer_at_both_levels(bench: Any) -> None:
    main, _ = bench
    args = main.parser().parse_args([])
    assert "peers" in args.only
    assert args.peers == ["arq", "saq", "dbos", "agentmill"]
    assert args.peer_durability == ["everysec", "always"]


def test_peer_arguments_parse(bench: Any) -> None:
    main, _ = bench
    args = main.parser().parse_args(
        ["--only", "peers", "--peers", "saq", "dbos", "--peer-durability", "always", "--peer-runs", "50"]
    )
    assert args.only == ["peers"]
    assert args.peers == ["saq", "dbos"]
    assert args.peer_durability == ["always"]
    assert args.peer_runs == 50


@pytest.mark.parametrize("argv", [["--peers", "celery"], ["--peer-durability", "no"]])
def test_unknown_peer_or_level_is_refused(bench: Any, argv: list[str]) -> None:
    main, _ = bench
    with pytest.raises(SystemExit):
        main.parser().parse_args(argv)


def test_each_redis_level_meets_the_postgres_level_that_loses_as_much(bench: Any) -> None:
    _, peers = bench
    assert peers.durability_pairs(["always", "everysec"]) == [("always", "on"), ("everysec", "off")]


def test_a_peer_whose_package_is_missing_is_skipped_with_the_reason(
    bench: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, peers = bench
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "dbos" else real(n, *a))
    peer, why = peers.make_peer("dbos")
    assert peer is None and "`dbos` is not installed" in why
    peer, why = peers.make_peer("arq")
    assert peer is not None and why == ""


def test_the_table_sets_each_system_beside_agentmill_and_states_the_setup(bench: Any) -> None:
    main, peers = bench
    args = main.parser().parse_args(["--only", "peers", "--reps", "2", "--peer-durability", "always"])
    b = peers.PeerFigures(args)
    results = [
        peers.PeerResult("arq", "always", rates=[100.0, 120.0], p50=30.0, p99=70.0),
        peers.PeerResult("saq", "always", rates=[300.0, 280.0], p50=2.0, p99=9.0, lost=1),
        peers.PeerResult("dbos", "always", skipped="no private PostgreSQL: no initdb"),
        peers.PeerResult("agentmill", "always", rates=[200.0, 220.0], p50=20.0, p99=40.0),
    ]
    b.record_peers(results, [("always", "on")])
    table = b.peers_table
    assert "concurrency 100, N=1000 × 2 reps" in table
    assert "skipped: no private PostgreSQL: no initdb" in table
    assert "(1 of 2000 jobs did not complete)" in table
    assert "PostgreSQL synchronous_commit on" in table and "Redis AOF appendfsync always" in table
    vs = {f.name: f for f in b.figures}
    arq = vs["12. peers, always/sync_commit on: agentmill vs bare arq"]
    assert arq.ratio() == pytest.approx(210.0 / 110.0)
    assert "agentmill 40.0 ms, bare arq 70.0 ms" in arq.note
    assert not any("DBOS" in name for name in vs)  # a skipped peer has no ratio
    assert "110 (100–120)" in table and "300 (280–300)" not in table and "290 (280–300)" in table


def test_pct_is_the_nearest_rank(bench: Any) -> None:
    _, peers = bench
    xs = [float(x) for x in range(1, 101)]
    assert peers.pct(xs, 99) == 99.0
    assert peers.pct(xs, 100) == 100.0
    assert peers.pct([5.0, 1.0, 3.0], 0) == 1.0
