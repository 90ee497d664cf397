"""Why a tenant's schedules are held at a look, if they are: the ``pausedReason`` of its schedules
while their firings are skipped (counted in ``skipped``), each reason beginning with what holds it:

- ``token:`` no running API process's token names the tenant (producer.schedules.live);
- ``disabled:`` its quota says ``"disabled": true`` (shared.quotas);
- ``budget:`` its day budget (tokensPerDay, costUsdPerDay) is spent for the UTC day of the look, as
  the API's admission reads it (producer.admission.spent_budget: the day's counters the budget
  scripts keep), so a firing is held exactly when its run would be refused ``budget_exhausted``.

A held schedule is looked at again once a lease later (producer.schedules.firer) and fires again
by itself, from its next firing after then, once nothing holds it: the token back, the quota
enabled again, or the next UTC day begun (its counters start at zero).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from producer.admission import spent_budget
from producer.routing import Parts
from producer.schedules.live import LiveTenants
from shared.clock import utc_day
from shared.quotas import Quotas

__all__ = ["held_tenants"]


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
