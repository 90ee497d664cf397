"""A timing bound applies to a median of enough samples only (tests/support/sampled_bounds.py)."""

from __future__ import annotations

from tests.support.sampled_bounds import MIN_SAMPLES, median_over_bound


def test_one_slow_sample_is_reported_not_failed() -> None:
    failure, figure = median_over_bound("recovery", [12.9], 6.0)
    assert failure is None
    assert "12.90" in figure and "n=1" in figure and "not checked" in figure


def test_enough_samples_over_the_bound_fail() -> None:
    failure, figure = median_over_bound("recovery", [5.0, 12.9, 7.0], 6.0)
    assert figure == "recovery: median 7.00 s over n=3 (bound 6 s)"
    assert MIN_SAMPLES == 3
    assert failure is not None and "median 7.00" in failure and failure.endswith("exceeded")
    assert median_over_bound("recovery", [5.0, 12.9, 2.0], 6.0)[0] is None  # median 5.0


def test_no_sample_is_no_figure() -> None:
    assert median_over_bound("recovery", [], 6.0) == (None, "recovery: no sample, the 6 s bound not checked")
