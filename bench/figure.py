"""One figure of the bench: our samples beside a baseline measured in the same run."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Figure:
    name: str
    unit: str
    ours: list[float] = field(default_factory=list)
    base: list[float] = field(default_factory=list)
    base_name: str = ""
    target: str = ""
    higher_is_better: bool = True
    note: str = ""
    # Named numbers the note speaks of, kept machine-readable (bench/report.py sizes a pool from them).
    extra: dict[str, float] = field(default_factory=dict)

    def med(self, xs: list[float]) -> float:
        return statistics.median(xs) if xs else float("nan")

    def ratio(self) -> float | None:
        if not self.ours or not self.base:
            return None
        b = self.med(self.base)
        return self.med(self.ours) / b if b else None

    def row(self) -> dict[str, Any]:
        return {
            "figure": self.name,
            "unit": self.unit,
            "ours": {
                "median": self.med(self.ours),
                "min": min(self.ours, default=None),
                "max": max(self.ours, default=None),
                "samples": self.ours,
            },
            "baseline": {
                "name": self.base_name,
                "median": self.med(self.base) if self.base else None,
                "samples": self.base,
            },
            "ratio": self.ratio(),
            "target": self.target,
            "note": self.note,
            "extra": self.extra,
        }


def fmt(xs: list[float]) -> str:
    if not xs:
        return "–"
    m = statistics.median(xs)
    if len(xs) == 1:
        return f"{m:,.3g}"
    return f"{m:,.3g} ({min(xs):,.3g}–{max(xs):,.3g})"
