"""Which version of a tenant's agent a new run gets (producer.agent_choice): deterministic by run
id, and a ramp of p % takes about p % of the runs."""

from __future__ import annotations

import math

from producer.agent_choice import AgentChoice, Pointers, Ramp, in_ramp


def pointers(current: int = 1, ramp: Ramp | None = None) -> Pointers:
    return Pointers(latest=3, current=current, ramp=ramp, created=(1, 2, 3), created_at=1, updated_at=1)


def test_a_ramp_of_ten_percent_over_2000_runs_takes_200_give_or_take_40() -> None:
    ids = [f"run_{i:032x}" for i in range(2_000)]
    choice = AgentChoice("support", pointers(1, Ramp(2, 10)), None)
    got = [choice.version_for(i) for i in ids]
    ramped = got.count(2)
    assert abs(ramped - 200) <= 40, ramped
    assert got.count(1) == 2_000 - ramped
    # the binomial spread: within 3 sd of the mean for the ids of other agents too
    sd = math.sqrt(2_000 * 0.1 * 0.9)
    for name in ("billing", "triage", "a"):
        assert abs(sum(in_ramp(name, i, 10) for i in ids) - 200) <= 3 * sd


def test_a_run_id_always_gets_the_same_version() -> None:
    choice = AgentChoice("support", pointers(1, Ramp(2, 37.5)), None)
    first = [choice.version_for(f"r{i}") for i in range(500)]
    assert first == [choice.version_for(f"r{i}") for i in range(500)]


def test_the_ramp_share_grows_with_its_percent_and_keeps_its_runs() -> None:
    ids = [f"r{i}" for i in range(1_000)]
    at10 = {i for i in ids if in_ramp("support", i, 10)}
    at50 = {i for i in ids if in_ramp("support", i, 50)}
    assert at10 <= at50  # raising the share keeps the runs it had
    assert not any(in_ramp("support", i, 0) for i in ids)
    assert all(in_ramp("support", i, 100) for i in ids)


def test_a_version_asked_for_wins_and_no_ramp_means_the_current_one() -> None:
    assert AgentChoice("support", pointers(1, Ramp(2, 100)), 3).version_for("x") == 3
    assert AgentChoice("support", pointers(2), None).version_for("x") == 2
    assert AgentChoice("support", pointers(1, Ramp(2, 10)), None).wanted() == [1, 2]
    assert AgentChoice("support", pointers(1, Ramp(2, 10)), 3).wanted() == [3]


def test_pointers_read_as_the_scripts_write_them() -> None:
    p = Pointers.parse({"latest": 2, "current": 1, "ramp": {"version": 2, "percent": 10}, "created": [5, 6],
                        "createdAt": 5, "updatedAt": 6})  # fmt: skip
    assert p.view() == {
        "currentVersion": 1, "latestVersion": 2, "ramp": {"version": 2, "percent": 10.0},
        "versions": [{"version": 1, "createdAt": 5}, {"version": 2, "createdAt": 6}],
        "createdAt": 5, "updatedAt": 6,
    }  # fmt: skip
    assert Pointers.parse({"latest": 1, "current": 1, "created": {"1": 5}}).created == (5,)
