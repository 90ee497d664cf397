"""Timing bounds checked on enough samples: a figure from one or two samples on a loaded machine says
more about the load than about the code, so a bound applies from ``MIN_SAMPLES`` samples on and,
below that, the figure is only reported. Guarantees (nothing lost, nothing twice, every run ended in
time) are no timing bounds: the tests keep asserting them whatever the samples."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

__all__ = ["MIN_SAMPLES", "median_over_bound", "over_bound"]

MIN_SAMPLES = 3


def over_bound(
    what: str, value: float | None, n: int, bound: float, min_samples: int = MIN_SAMPLES
) -> tuple[str | None, str]:
    """(the failure, or None; the figure as reported) of ``value`` (seconds, None: no sample), a
    figure of ``n`` independent samples: a failure when ``n`` >= ``min_samples`` and it is not under
    ``bound``."""
    if value is None or n == 0:
        return None, f"{what}: no sample, the {bound:g} s bound not checked"
    figure = f"{what}: {value:.2f} s over n={n} (bound {bound:g} s)"
    if n < min_samples:
        return None, f"{figure}, not checked: fewer than {min_samples} samples"
    return (f"{figure} exceeded" if value >= bound else None), figure


def median_over_bound(
    what: str, samples: Sequence[float], bound: float, min_samples: int = MIN_SAMPLES
) -> tuple[str | None, str]:
    """``over_bound`` of the samples' median."""
    value = statistics.median(samples) if samples else None
    return over_bound(f"{what}, median", value, len(samples), bound, min_samples)
