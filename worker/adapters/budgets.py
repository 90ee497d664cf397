"""Tenants' day budgets, pool-wide (``tokensPerDay``, ``costUsdPerDay`` in AGENTMILL_TENANT_QUOTAS):
the Redis side of the ``BudgetPort`` (worker/ports.py).

Before a model call the runner reserves the call's worst case (the machine's ``ModelRequest``
reserve: ``policy.prompt_bound``, a bound its text cannot game, + maxTokens, and its cost) on the tenant's budget of the UTC day, one
script at the tenant's home partition (budget_reserve.lua: spent + held + this <= limit, else
refused; the hold is scaled up for the rest of the day once a call used more than it held: the
day's highest such ratio, BudgetField.OVERCOUNT); after the call it settles the hold with the actual usage (budget.lua): with the run's
commit of the reply when the tenant's budget lives in the run's slot (one partition: always), else
by a call of its own (budget_settle.lua) before that commit. Every
worker reserves on the same key (one slot per tenant), so the tenant cannot overspend by more than
its calls' holds allow, whichever workers and partitions its runs are on. A hold lives
``AGENTMILL_BUDGET_HOLD_MS``: one whose worker died before settling is released by the next reserve.
Costs travel as integers of nano-USD, so Redis sums them exactly.
"""

from __future__ import annotations

import logging
from typing import Any

from redis.exceptions import RedisError

from shared import keys
from shared.calls.budgets import SCALE_ONE, BudgetLimit, BudgetReserve, BudgetReserveVerdict, BudgetSettle
from shared.clock import now_ms, utc_day
from shared.partitions import Partitions
from shared.quotas import DEFAULT_TENANT, NANO_USD, Quotas
from shared.scripts import Scripts, text
from worker.core.commit_step import Settlement
from worker.models.base import ModelCallError
from worker.ports import BudgetHold

__all__ = ["KEYS_TTL_MS", "RedisBudgetHold", "TenantBudgets", "nano_usd", "settle_by_call"]

log = logging.getLogger("agentmill.budgets")

KEYS_TTL_MS = 2 * 86_400_000  # a day's budget keys outlive their day by a day (late settlements)


def nano_usd(cost_usd: float | None) -> int:
    return round((cost_usd or 0.0) * NANO_USD)


class RedisBudgetHold:
    __slots__ = ("_budgets", "_keys", "_member", "_part", "slot")

    def __init__(self, budgets: TenantBudgets, part: keys.Partition, k: list[str], member: str) -> None:
        self._budgets, self._part, self._keys, self._member = budgets, part, k, member
        self.slot = part.slot

    def settlement(self, tokens: int, cost_usd: float | None) -> Settlement:
        return Settlement(self._keys, self._member, max(0, tokens), max(0, nano_usd(cost_usd)), KEYS_TTL_MS)

    async def settle(self, tokens: int, cost_usd: float | None) -> None:
        await settle_by_call(
            self._budgets.parts, self._budgets.scripts, self._part, self.settlement(tokens, cost_usd)
        )


async def settle_by_call(
    parts: Partitions[Any], scripts: Scripts, part: keys.Partition, st: Settlement
) -> None:
    """A settlement by a call of its own (budget_settle.lua) on ``part``, the node of the budget's
    slot. Best effort: one that cannot reach Redis leaves the hold to expire (released), as a dead
    worker's does."""
    call = BudgetSettle(tuple(st.keys), st.member, st.tokens, st.nano_usd, st.ttl_ms)
    k, args = call.keys(part), call.argv()
    try:
        await parts.call(part, lambda c: scripts.budget_settle(keys=k, args=args, client=c))
    except RedisError as exc:
        log.warning("budget hold %s not settled (%s): it is released when it expires", st.member, exc)


class TenantBudgets:
    """BudgetPort on Redis."""

    async def spent(self, tenant: str, member: str, tokens: int, cost_usd: float | None) -> None:
        """Count a call's usage on its tenant's day with no hold of this worker's to replace (an
        economy call answered by a batch: its hold, taken when it was written, expires by itself)."""
        tenant = tenant or DEFAULT_TENANT
        part = self.parts.home(tenant)
        day = utc_day(now_ms())
        k = [part.tenant_budget(tenant, day), part.tenant_budget_holds(tenant, day)]
        st = Settlement(
            k, f"{member}|{SCALE_ONE}|0|0", max(0, tokens), max(0, nano_usd(cost_usd)), KEYS_TTL_MS
        )
        await settle_by_call(self.parts, self.scripts, part, st)

    def __init__(self, parts: Partitions[Any], scripts: Scripts, quotas: Quotas, hold_ms: int) -> None:
        self.parts = parts
        self.scripts = scripts
        self.quotas = quotas
        self.hold_ms = hold_ms

    def limited(self, tenant: str) -> bool:
        return self.quotas.of(tenant or DEFAULT_TENANT).budgeted

    async def run(self, script: Any, part: keys.Partition, k: list[str], a: list[Any]) -> Any:
        async def go(c: Any) -> Any:
            return await script(keys=k, args=a, client=c)

        return await self.parts.call(part, go)

    async def reserve(
        self, tenant: str, hold_id: str, tokens: int, cost_usd: float | None
    ) -> BudgetHold | str:
        tenant = tenant or DEFAULT_TENANT
        q = self.quotas.of(tenant)
        day = utc_day(now_ms())
        part = self.parts.home(tenant)
        call = BudgetReserve(tenant, day, hold_id, tokens, nano_usd(cost_usd), q.tokens_per_day,
                             nano_usd(q.cost_usd_per_day), self.hold_ms, KEYS_TTL_MS)  # fmt: skip
        k = call.keys(part)
        try:
            reply = await self.run(self.scripts.budget_reserve, part, k, call.argv())
        except RedisError as exc:
            raise ModelCallError("connection", f"the tenant budget could not reach Redis: {exc}") from None
        if call.verdict(reply) is BudgetReserveVerdict.OK:
            return RedisBudgetHold(self, part, k, text(reply[1]))
        which, spent, held, this, limit, scale = text(reply[1]), *(int(text(x)) for x in reply[2:7])
        scaled = (
            f" ({scale / SCALE_ONE:g}x its bound: a call of the day was counted at that many times its hold)"
            if scale > SCALE_ONE
            else ""
        )
        if which == BudgetLimit.TOKENS:
            return (
                f"tenant {tenant!r} tokensPerDay={limit} ({day} UTC): spent {spent}, held {held} by calls in "
                f"flight, the next model call reserves {this}{scaled}; {spent + held + this} > {limit}"
            )
        usd = [v / NANO_USD for v in (spent, held, this, limit)]
        return (
            f"tenant {tenant!r} costUsdPerDay={usd[3]:g} ({day} UTC): spent ${usd[0]:.6f}, held ${usd[1]:.6f} "
            f"by calls in flight, the next model call reserves ${usd[2]:.6f}{scaled}; "
            f"${usd[0] + usd[1] + usd[2]:.6f} > ${usd[3]:g}"
        )
