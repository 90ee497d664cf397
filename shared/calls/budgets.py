"""Calls on a tenant's day budget at its home partition (worker/adapters/budgets.py): a model call's
hold before it, its settlement after it when the run's commit cannot write it."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from shared.calls.base import KEY_ONLY, ScriptCall
from shared.keys import Partition

__all__ = ["SCALE_ONE", "BudgetLimit", "BudgetReserve", "BudgetReserveVerdict", "BudgetSettle"]

# A hold's scale in thousandths: SCALE_ONE holds a call at its worst case as estimated; a day on which a
# call used more than it held scales its later holds up (BudgetField.OVERCOUNT).
SCALE_ONE = 1000


class BudgetReserveVerdict(StrEnum):
    OK = "ok"  # held (the hold's member second)
    REFUSED = "refused"  # (the BudgetLimit second, then spent, held, this call, the limit, the scale)


class BudgetLimit(StrEnum):
    """The day's limit a refused hold would pass (the Lua's ``LIMIT.*``)."""

    TOKENS = "tokens"  # tokensPerDay
    COST = "cost"  # costUsdPerDay


@dataclass(frozen=True, slots=True)
class BudgetReserve(ScriptCall):
    """budget_reserve.lua: hold a model call's worst case on its tenant's budget of ``day`` (spent +
    held + this <= the day's limit, else refused and counted); expired holds are released first."""

    SCRIPT = "budget_reserve"
    KEY_NAMES = ("budget", "holds")  # the day's budget hash (BudgetField), its holds zset
    VERDICT = BudgetReserveVerdict

    tenant: str = field(metadata=KEY_ONLY)
    day: str = field(metadata=KEY_ONLY)  # UTC, shared.clock.utc_day
    hold_id: str
    tokens: int
    nano_usd: int  # unscaled
    tokens_per_day: int  # 0 = none
    nano_usd_per_day: int  # 0 = none
    hold_ms: int  # how long an unsettled hold lives
    ttl_ms: int  # the day's keys'

    def keys(self, part: Partition) -> list[str]:
        return [part.tenant_budget(self.tenant, self.day), part.tenant_budget_holds(self.tenant, self.day)]


@dataclass(frozen=True, slots=True)
class BudgetSettle(ScriptCall):
    """budget_settle.lua: a hold replaced by what the call used (budget.lua), by a call of its own;
    answers 1 when the hold was still there, else 0."""

    SCRIPT = "budget_settle"
    KEY_NAMES = ("budget", "holds")

    budget_keys: tuple[str, ...] = field(metadata=KEY_ONLY)  # as the hold named them (Settlement.keys)
    member: str  # the hold ('holdId|scale|tokens|nanoUsd')
    tokens: int  # used
    nano_usd: int  # used
    ttl_ms: int  # the day's keys'

    def keys(self, part: Partition | None = None) -> list[str]:
        return list(self.budget_keys)
