"""A timing bound applies to a figure of enough samples only (tests/support/sampled_bounds.py)."""

from __future__ import annotations

from tests.support.sampled_bounds import MIN_SAMPLES, median_over_bound, over_bound


def test_one_slow_sample_is_reported_not_failed() -> None:
    failure, figure = median_over_bound("recovery", [12.9], 6.0)
    assert failure is None
    assert figure == "recovery, median: 12.90 s over n=1 (bound 6 s), not checked: fewer than 3 samples"


def test_enough_samples_over_the_bound_fail() -> None:
    failure, figure = median_over_bound("recovery", [5.0, 12.9, 7.0], 6.0)
    assert MIN_SAMPLES == 3
    assert figure == "recovery, median: 7.00 s over n=3 (bound 6 s)"
    assert failure == f"{figure} exceeded"
    assert median_over_bound("recovery", [5.0, 12.9, 2.0], 6.0)[0] is None  # median 5.0


def test_a_figure_of_a_few_samples_is_checked_by_their_count() -> None:
    # the slowest of 16 runs that one kill stopped: one sample of the machine's load, not sixteen
    assert over_bound("slowest run", 33.1, 1, 30.0)[0] is None
    assert (
        over_bound("slowest run", 33.1, 3, 30.0)[0] == "slowest run: 33.10 s over n=3 (bound 30 s) exceeded"
    )


def test_no_sample_is_no_figure() -> None:
    assert median_over_bound("recovery", [], 6.0) == (
        None,
        "recovery, median: no sample, the 6 s bound not checked",
    )
