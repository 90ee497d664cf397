"""One exposition from the expositions of ``agentmill worker --processes N``'s processes. Pure: the
supervisor (app/supervisor.py) fetches the texts and serves the result.

Counters, histograms and summaries are summed over the processes (a sample's name and labels name
it), so ``agentmill_runs_finished_total`` counts the runs of all of them. Gauges (and any other
type) are not: a sum of start times, versions or heartbeat ages means nothing, so each process's
gauges keep a ``process`` label with its index (``sum()`` over them where a total makes sense, as
for ``agentmill_runs_in_progress``).

A process that dies takes its counts with it; its replacement starts from 0. ``retire`` folds the
last counts seen of a process into a base that is added to every later merge, so the summed
counters never go down (a drop reads as a counter reset to ``rate()``, and the whole remaining
sum as new increments). Increments after the last fetch before the death are lost.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

__all__ = ["PROCESS_LABEL", "SUMMED", "MergedMetrics", "merge", "parse"]

PROCESS_LABEL = "process"
SUMMED = frozenset({"counter", "histogram", "summary", "gaugehistogram"})

Key = tuple[str, tuple[tuple[str, str], ...]]  # a sample's name and its sorted labels


def parse(text: str) -> list[Metric]:
    """A process's exposition; ValueError when it is not one."""
    return list(text_string_to_metric_families(text))


def _key(s: Sample) -> Key:
    return s.name, tuple(sorted(s.labels.items()))


def merge(
    processes: Mapping[str, Iterable[Metric]],
    base: Mapping[str, tuple[Metric, dict[Key, float]]] | None = None,
) -> list[Metric]:
    """The families of ``processes`` (by process label), summed or labelled by process; ``base``:
    counts of processes gone, by family name (``MergedMetrics.retire``), added to the sums."""
    out: dict[str, Metric] = {}
    sums: dict[str, dict[Key, tuple[Sample, float]]] = {}

    def family_like(fam: Metric) -> Metric | None:
        merged = out.get(fam.name)
        if merged is None:
            merged = out[fam.name] = Metric(fam.name, fam.documentation, fam.type, fam.unit)
        return merged if merged.type == fam.type else None  # two builds during a roll-out: the first's

    def add(fam: Metric, samples: Iterable[tuple[Sample, float]]) -> None:
        acc = sums.setdefault(fam.name, {})
        for s, value in samples:
            k = _key(s)
            seen = acc.get(k)
            acc[k] = (s, value + (seen[1] if seen else 0.0))

    for process, families in processes.items():
        for fam in families:
            merged = family_like(fam)
            if merged is None:
                continue
            if fam.type in SUMMED:
                add(fam, ((s, s.value) for s in fam.samples))
                continue
            merged.samples.extend(
                Sample(s.name, {**s.labels, PROCESS_LABEL: process}, s.value, s.timestamp, s.exemplar)
                for s in fam.samples
            )
    for fam, counts in (base or {}).values():
        if family_like(fam) is not None:
            add(fam, ((Sample(k[0], dict(k[1]), v), v) for k, v in counts.items()))
    for name, acc in sums.items():
        out[name].samples.extend(Sample(s.name, s.labels, total) for s, total in acc.values())
    return list(out.values())


class MergedMetrics:
    """The last families fetched from each process, and the counts of processes gone."""

    def __init__(self) -> None:
        self.last: dict[str, list[Metric]] = {}
        self.base: dict[str, tuple[Metric, dict[Key, float]]] = {}

    def update(self, process: str, families: list[Metric]) -> None:
        self.last[process] = families

    def retire(self, process: str) -> None:
        """``process`` died: its last counts join the base, its gauges go."""
        for fam in self.last.pop(process, []):
            if fam.type not in SUMMED:
                continue
            _, acc = self.base.setdefault(fam.name, (fam, {}))
            for s in fam.samples:
                k = _key(s)
                acc[k] = acc.get(k, 0.0) + s.value

    def collect(self) -> Iterator[Metric]:
        """A ``Collector``: register it on a registry and render that."""
        yield from merge(self.last, self.base)
