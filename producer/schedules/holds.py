"""Why a tenant's schedules are held at a look, if they are: the ``pausedReason`` of its schedules
while their firings are skipped (counted in ``skipped``), each reason beginning with what holds it:

- ``token:`` no running API process's token names the tenant (producer.schedules.live);
- ``disabled:`` its quota says ``"disabled": true`` (shared.quotas);
- ``budget:`` its day budget (tokensPerDay, costUsdPerDay) is spent for the UTC day of the look, as
  the API's admission reads it (producer.admission.spent_budget: the day's counters the budget
  scripts keep), so a firing is held exactly when its run would be refused ``budget_exhausted``;
- ``quota:`` (one schedule, not the tenant's all) the tenant has more schedules than its
  maxSchedules, a quota lowered below what it had (the cap is checked at creation): its oldest
  maxSchedules schedules (by createdAt, then key) fire, the others are held (``capped_schedules``).

A held schedule is looked at again once a lease later (producer.schedules.firer) and fires again
by itself, from its next firing after then, once nothing holds it: the token back, the quota
enabled again, the next UTC day begun (its counters start at zero), or the tenant back within its
maxSchedules (schedules deleted, or the cap raised).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

from producer.admission import spent_budget
from producer.schedules.live import LiveTenants
from shared import keys
from shared.clock import utc_day
from shared.quotas import Quotas
from shared.replies import text
from shared.script_sending import Parts

__all__ = ["capped_schedules", "held_tenants", "over_cap_reason"]


async def held_tenants(
    parts: Parts, quotas: Quotas, live: LiveTenants | None, tenants: Iterable[str], now: int
) -> dict[str, str]:
    """tenant -> why its schedules are held at ``now`` (ms, Redis time), for those of ``tenants``
    held: one read of its day's budget for each budgeted tenant not held otherwise."""
    held: dict[str, str] = {}
    budgeted: list[str] = []
    for tenant in set(tenants):
        quota = quotas.of(tenant)
        if live is not None and not live.named(tenant, now):
            held[tenant] = (
                f"token: tenant {tenant} is named by no API token of a running API process "
                "(AGENTMILL_API_TOKENS); resumes when one names it again"
            )
        elif quota.disabled:
            held[tenant] = (
                f'disabled: tenant {tenant} is disabled ("disabled": true in AGENTMILL_TENANT_QUOTAS); '
                "resumes when it is enabled again"
            )
        elif quota.budgeted:
            budgeted.append(tenant)
    spent = await asyncio.gather(*(spent_budget(parts, t, quotas.of(t), now) for t in budgeted))
    for tenant, how in zip(budgeted, spent, strict=True):
        if how is not None:
            held[tenant] = (
                f"budget: tenant {tenant}'s day budget for {utc_day(now)} (UTC) is spent: it {how}; "
                "resumes after 00:00 UTC"
            )
    return held


async def capped_schedules(parts: Parts, quotas: Quotas, tenants: Iterable[str]) -> dict[str, frozenset[str]]:
    """tenant -> the keys of its oldest maxSchedules schedules (by createdAt, then key), for those of
    ``tenants`` that have more than their maxSchedules: the others are held. One round trip per node
    for the counts of every capped tenant, and one more for the oldest of a tenant over its cap."""
    capped = sorted({t for t in tenants if quotas.of(t).max_schedules})
    if not capped:
        return {}

    def count(pipe: Any, p: keys.Partition) -> None:
        for t in capped:
            pipe.zcard(p.schedule_index(t))

    counts = await parts.each(count)
    over = [t for i, t in enumerate(capped) if sum(int(r[i]) for r in counts) > quotas.of(t).max_schedules]
    if not over:
        return {}

    def oldest(pipe: Any, p: keys.Partition) -> None:
        for t in over:
            pipe.zrange(p.schedule_index(t), 0, quotas.of(t).max_schedules - 1, withscores=True)

    found = await parts.each(oldest)
    out: dict[str, frozenset[str]] = {}
    for i, t in enumerate(over):
        entries = sorted((float(score), text(k)) for r in found for k, score in r[i])
        out[t] = frozenset(k for _, k in entries[: quotas.of(t).max_schedules])
    return out


def over_cap_reason(tenant: str, cap: int) -> str:
    """The ``pausedReason`` of a schedule held by ``capped_schedules``."""
    return (
        f"quota: tenant {tenant} has more schedules than its maxSchedules ({cap}, "
        "AGENTMILL_TENANT_MAX_SCHEDULES or its AGENTMILL_TENANT_QUOTAS entry): its oldest fire; "
        "resumes when schedules are deleted or the cap is raised"
    )
