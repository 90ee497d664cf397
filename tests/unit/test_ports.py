"""The test servers' ports: below the ephemeral range, a band per pytest-xdist worker, never twice."""

from __future__ import annotations

import socket

import pytest

from tests.support import ports


def test_ports_are_distinct_bindable_and_below_the_ephemeral_range() -> None:
    got = [ports.free_port() for _ in range(200)]
    assert len(set(got)) == len(got)
    low = ports._ephemeral_low()
    assert all(ports.LOWEST <= p < low for p in got)
    with socket.socket() as s:
        s.bind(("127.0.0.1", got[-1]))


def test_a_port_someone_listens_on_is_skipped() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        taken = s.getsockname()[1]
        p = ports._Ports()
        p._band, p._next = range(taken, taken + 50), 0  # the walk starts at the taken port
        assert taken < p.take() < taken + 50


@pytest.mark.parametrize("worker,count", [("gw0", 2), ("gw1", 2), ("gw3", 4), ("", 1)])
def test_each_xdist_worker_has_its_own_band(monkeypatch: pytest.MonkeyPatch, worker: str, count: int) -> None:
    monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", str(count))
    band = ports._band()
    others = []
    for i in range(count):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", f"gw{i}")
        others.append(ports._band())
    assert band in others
    assert all(set(a).isdisjoint(b) for i, a in enumerate(others) for b in others[i + 1 :])
    assert sum(len(b) for b in others) >= (ports._ephemeral_low() - ports.LOWEST) - count
