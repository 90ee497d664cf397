"""A tenant's usage by UTC day and agent (``GET /v1/usage``), summed over the partitions: each run's
ending (its worker's terminal commit, or the script that ends it outside a worker) adds its usage to
its tenant's hash of the day on its partition (keys.Partition.usage_day; worker/runner/tally.py), so
a report reads one hash per day and partition, pipelined: one round trip per node."""

from __future__ import annotations

import datetime as dt
from typing import Any, Literal

from agentmill_client.usage import UsageAnswer, UsageDay, UsageTotals
from shared import keys
from shared.fields import EconomyUsagePart, UsagePart
from shared.quotas import NANO_USD
from shared.replies import text
from shared.script_sending import Parts

__all__ = ["MAX_USAGE_DAYS", "read_usage", "usage_range"]

MAX_USAGE_DAYS = 92  # days one report may span


def usage_range(start: str | None, end: str | None, today: dt.date) -> tuple[dt.date, dt.date]:
    """The report's first and last day: ``to`` defaults to today, ``from`` to 30 days before it.
    Raises ValueError (naming the parameter) for a date that is not YYYY-MM-DD, a reversed range
    or one longer than MAX_USAGE_DAYS."""

    def day(value: str, name: str) -> dt.date:
        try:
            return dt.date.fromisoformat(value)
        except ValueError:
            raise ValueError(f"{name}: not a date (YYYY-MM-DD): {value!r}") from None

    last = day(end, "to") if end else today
    try:
        first = day(start, "from") if start else last - dt.timedelta(days=29)
    except OverflowError:  # `to` in the first days of year 1
        raise ValueError("to: too early for a 30-day report; give from") from None
    if first > last:
        raise ValueError("from: after to")
    if (last - first).days + 1 > MAX_USAGE_DAYS:
        raise ValueError(f"from: a report spans at most {MAX_USAGE_DAYS} days")
    return first, last


_ECONOMY = {
    UsagePart.IN: EconomyUsagePart.IN,
    UsagePart.OUT: EconomyUsagePart.OUT,
    UsagePart.COST: EconomyUsagePart.COST,
    UsagePart.RUNS: EconomyUsagePart.RUNS,
    UsagePart.CACHE_READ: EconomyUsagePart.CACHE_READ,
    UsagePart.CACHE_WRITE: EconomyUsagePart.CACHE_WRITE,
}


def _lanes(fields: dict[str, int]) -> dict[Literal["standard", "economy"], UsageTotals]:
    """The totals split by lane: the economy lane's share is counted apart, the standard's is the rest."""
    economy = {part.value: fields.get(eco, 0) for part, eco in _ECONOMY.items()}
    standard = {part.value: fields.get(part, 0) - economy[part.value] for part in _ECONOMY}
    return {"standard": _totals(standard), "economy": _totals(economy)}


def _totals(fields: dict[str, int]) -> UsageTotals:
    return UsageTotals(
        input_tokens=fields.get(UsagePart.IN, 0),
        output_tokens=fields.get(UsagePart.OUT, 0),
        cost_usd=round(fields.get(UsagePart.COST, 0) / NANO_USD, 9),
        runs=fields.get(UsagePart.RUNS, 0),
        cache_read_tokens=fields.get(UsagePart.CACHE_READ, 0),
        cache_write_tokens=fields.get(UsagePart.CACHE_WRITE, 0),
    )


async def read_usage(parts: Parts, tenant: str, first: dt.date, last: dt.date) -> UsageAnswer:
    days = [(first + dt.timedelta(days=i)).isoformat() for i in range((last - first).days + 1)]

    def op(pipe: Any, p: keys.Partition) -> None:
        for d in days:
            pipe.hgetall(p.usage_day(tenant, d))

    replies = await parts.each(op)
    out: list[UsageDay] = []
    grand: dict[str, int] = {}
    for i, d in enumerate(days):
        agents: dict[str, dict[str, int]] = {}
        for per_part in replies:
            for f, v in per_part[i].items():
                agent, _, what = text(f).rpartition("|")
                a = agents.setdefault(agent, {})
                a[what] = a.get(what, 0) + int(text(v))
        total: dict[str, int] = {}
        for a in agents.values():
            for what, n in a.items():
                total[what] = total.get(what, 0) + n
                grand[what] = grand.get(what, 0) + n
        out.append(
            UsageDay(
                day=d,
                agents={k: _totals(v) for k, v in sorted(agents.items())},
                total=_totals(total),
                lanes=_lanes(total),
            )
        )
    return UsageAnswer(from_=days[0], to=days[-1], days=out, total=_totals(grand), lanes=_lanes(grand))
