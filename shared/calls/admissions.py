"""Admissions asked before runs are created (shared.calls.submission): a tenant's maxActive and
submission rate, a root run's tree of sub-agents, an Idempotency-Key's window."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from shared.calls.base import ScriptCall
from shared.keys import Partition

__all__ = [
    "AdmitRate",
    "AdmitRateVerdict",
    "AdmitTenant",
    "AdmitTenantVerdict",
    "IdempotencyClaim",
    "TreeAdmit",
    "TreeVerdict",
]


class TreeVerdict(StrEnum):
    OK = "ok"
    MAX_CHILDREN = "max_children"  # the parent's children are at maxChildren
    MAX_DESCENDANTS = "max_descendants"  # the tree's runs are at maxDescendants


@dataclass(frozen=True, slots=True)
class TreeAdmit(ScriptCall):
    """tree_admit.lua: a root run's tree of sub-agents counts each new child (at the root's home).
    Reply: a TreeVerdict per child, in order."""

    SCRIPT = "tree_admit"
    KEY_NAMES = ("tree",)
    VERDICT = TreeVerdict

    root_id: str
    parent_run_id: str
    max_children: int  # 0 = none
    max_descendants: int  # 0 = none
    child_ids: tuple[str, ...]

    def keys(self, part: Partition) -> list[str]:
        return [part.tree(self.root_id)]


class AdmitTenantVerdict(StrEnum):
    OK = "ok"
    FULL = "full"  # the runs counted here second


@dataclass(frozen=True, slots=True)
class AdmitTenant(ScriptCall):
    """admit_tenant.lua: the tenant's maxActive on one partition for runs about to be submitted there
    (counted until they end)."""

    SCRIPT = "admit_tenant"
    KEY_NAMES = ("active",)
    VERDICT = AdmitTenantVerdict

    tenant: str
    now: int
    room: int | str  # maxActive for this partition ('' = none; -1: count, add nothing)
    ttl_ms: int
    grace_ms: int
    run_ids: tuple[str, ...]

    def keys(self, part: Partition) -> list[str]:
        return [part.tenant_active(self.tenant)]


class AdmitRateVerdict(StrEnum):
    OK = "ok"
    RATE_LIMITED = "rate_limited"  # the ms until the tokens are there second


@dataclass(frozen=True, slots=True)
class AdmitRate(ScriptCall):
    """admit_rate.lua: a tenant's submission token bucket at its home partition (n runs take n tokens,
    or all wait)."""

    SCRIPT = "admit_rate"
    KEY_NAMES = ("bucket",)
    VERDICT = AdmitRateVerdict

    tenant: str
    n: int
    per_second: float
    burst: int
    refund: str = ""  # '1' gives n back

    def keys(self, part: Partition) -> list[str]:
        return [part.tenant_rate(self.tenant)]


@dataclass(frozen=True, slots=True)
class IdempotencyClaim(ScriptCall):
    """idempotency_claim.lua: the run an Idempotency-Key names within its window (the record's, else
    the one offered, recorded). Reply: that run id."""

    SCRIPT = "idempotency_claim"
    KEY_NAMES = ("record",)

    named: str  # the id the key names without a window: where its record lives
    offered: str
    ttl_s: int

    def keys(self, part: Partition) -> list[str]:
        return [part.idempotency(self.named)]
