"""Timing bounds checked on enough samples: a median of one or two figures on a loaded machine says
more about the load than about the code, so a bound applies from ``MIN_SAMPLES`` figures on and,
below that, the figure is only reported. Guarantees (nothing lost, nothing twice) are no timing
bounds: the tests keep asserting them whatever the samples."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

__all__ = ["MIN_SAMPLES", "median_over_bound"]

MIN_SAMPLES = 3


def median_over_bound(
    what: str, samples: Sequence[float], bound: float, min_samples: int = MIN_SAMPLES
) -> tuple[str | None, str]:
    """(the failure, or None; the figure as reported): a failure when there are at least
    ``min_samples`` samples and their median is not under ``bound``."""
    if not samples:
        return None, f"{what}: no sample, the {bound:g} s bound not checked"
    median = statistics.median(samples)
    figure = f"{what}: median {median:.2f} s over n={len(samples)} (bound {bound:g} s)"
    if len(samples) < min_samples:
        return None, f"{figure}, not checked: fewer than {min_samples} samples"
    return (f"{figure} exceeded" if median >= bound else None), figure
