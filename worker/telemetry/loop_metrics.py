"""Counters and histograms for values that only the worker's event loop changes.

prometheus-client's ``Counter`` and ``Histogram`` take a lock on every increment, check their
labels on every call and walk the buckets in Python; a one-step run feeds them about 30 times
(its observer hooks took 28 µs through them, 12 µs through these). The worker's observer
runs on its event loop thread only, so these keep plain numbers and hand them to
prometheus-client's registry (a ``Collector``) when it is scraped: the exposition, the names,
``_total``, the buckets and the order of the series are prometheus-client's own
(``tests/unit/test_loop_metrics.py`` renders the same observations through both; observations
are finite numbers: a NaN would land in the first bucket here, in none there). Not for values
changed from other threads.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Iterator, Sequence
from typing import Generic, TypeVar

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.utils import INF, floatToGoString

__all__ = ["Counter", "Histogram"]


class CounterChild:
    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value: float = 0.0

    def inc(self, amount: float = 1) -> None:
        if amount < 0:
            raise ValueError("counters can only be incremented by non-negative amounts")
        self.value += amount


class HistogramChild:
    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = bounds
        self.counts = [0] * len(bounds)  # per bucket, not cumulative (added up at a scrape)
        self.sum = 0.0

    def observe(self, amount: float) -> None:
        # the first bound >= amount: Prometheus's buckets are "less than or equal"
        self.counts[bisect_left(self.bounds, amount)] += 1
        self.sum += amount


C = TypeVar("C", CounterChild, HistogramChild)


class _Family(Generic[C]):
    """A family and, without labels, its only child."""

    def __init__(
        self, name: str, documentation: str, labelnames: Iterable[str] = (), *, registry: CollectorRegistry
    ) -> None:
        self.name, self.documentation = name, documentation
        self.labelnames = tuple(labelnames)
        self._children: dict[tuple[str, ...], C] = {}
        self._only: C | None = None if self.labelnames else self.labels()
        registry.register(self)  # a Collector: collect() and describe()

    def _new(self) -> C:
        raise NotImplementedError

    def labels(self, *values: str) -> C:
        child = self._children.get(values)
        if child is None:
            if len(values) != len(self.labelnames):
                raise ValueError(f"{self.name}: {len(self.labelnames)} label values, not {len(values)}")
            key = tuple(str(v) for v in values)  # as prometheus-client has them: strings
            child = self._children.get(key)
            if child is None:
                child = self._children[key] = self._new()
        return child

    def _one(self) -> C:
        if self._only is None:
            raise ValueError(f"{self.name} has labels: use a child (labels())")
        return self._only

    def _family(self) -> Metric:
        raise NotImplementedError

    def _add(self, family: Metric, values: tuple[str, ...], child: C) -> None:
        """One child's samples into the family a scrape renders."""
        raise NotImplementedError

    def describe(self) -> Iterator[Metric]:
        yield self._family()

    def collect(self) -> Iterator[Metric]:
        family = self._family()
        for values, child in list(self._children.items()):
            self._add(family, values, child)
        yield family


class Counter(_Family[CounterChild]):
    def _new(self) -> CounterChild:
        return CounterChild()

    def inc(self, amount: float = 1) -> None:
        self._one().inc(amount)

    def _family(self) -> CounterMetricFamily:
        return CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)

    def _add(self, family: Metric, values: tuple[str, ...], child: CounterChild) -> None:
        assert isinstance(family, CounterMetricFamily)
        family.add_metric(values, child.value)


class Histogram(_Family[HistogramChild]):
    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Iterable[str] = (),
        *,
        buckets: Sequence[float],
        registry: CollectorRegistry,
    ) -> None:
        bounds = sorted(float(b) for b in buckets)
        if not bounds or bounds[-1] != INF:
            bounds.append(INF)
        self.bounds = tuple(bounds)
        self._les: list[str] = [floatToGoString(b) for b in self.bounds]  # type: ignore[no-untyped-call]
        super().__init__(name, documentation, labelnames, registry=registry)

    def _new(self) -> HistogramChild:
        return HistogramChild(self.bounds)

    def observe(self, amount: float) -> None:
        self._one().observe(amount)

    def _family(self) -> HistogramMetricFamily:
        return HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)

    def _add(self, family: Metric, values: tuple[str, ...], child: HistogramChild) -> None:
        assert isinstance(family, HistogramMetricFamily)
        total, cumulative = 0, []
        for le, n in zip(self._les, child.counts, strict=True):
            total += n
            cumulative.append((le, float(total)))
        family.add_metric(list(values), cumulative, child.sum)
