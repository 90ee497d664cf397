"""Per-tenant quotas: how many runs a tenant may have queued and running, how many may run at
once, and how many it may submit per second (a token bucket: bursts of submitBurst runs, at least
a full batch, refilled at submitsPerSecond). Defaults come from settings; AGENTMILL_TENANT_QUOTAS
(JSON, inline or a file path) overrides them per tenant:
``{"tenant-a": {"maxActive": 50, "maxRunning": 10, "submitsPerSecond": 5, "submitBurst": 2000,
"maxPriority": 5, "maxChildren": 20, "maxDescendants": 100, "tokensPerDay": 2000000, "costUsdPerDay": 25,
"maxSchedules": 20, "scheduleFiringsPerMinute": 120, "concurrencyLimit": 2}}``. 0 means no limit
(maxPriority: the highest priority its runs get; higher ones are lowered to it, default 9;
concurrencyLimit: a concurrency key's limit when a run names none, and the most a run may ask). maxSchedules and
scheduleFiringsPerMinute bound a tenant's cron schedules (producer/schedules/): how many it may have,
and how many runs they make per UTC minute together (a firing beyond is skipped and counted); a
tenant with more schedules than a lowered maxSchedules has its newest beyond it held.

maxActive counts every run of the tenant that has not ended, child runs (sub-agents) included, and a
run parked awaiting its children, a human or client tools still counts: a tenant's trees of runs
together never pass it. A child that does not fit is not started: its agent tool call gets an error
result naming the cap (shared/children.py), and the parent carries on. maxChildren (child runs one
run may start) and maxDescendants (runs in one root's tree) bound one tree the same way.

tokensPerDay and costUsdPerDay are the tenant's budget for a UTC day, pool-wide: each model call
reserves its worst case before it starts and settles its actual usage after (worker/adapters/budgets.py); a
call the day cannot afford ends its run ``budget_exceeded``, and a submission once the day is spent
gets 429 ``budget_exhausted`` until the next UTC midnight (producer/admission.py).

``"disabled": true`` disables a tenant: its submissions (runs, batches, retries, forks, schedules)
get 403 ``tenant_disabled``, its schedules are held (producer/schedules/holds.py), a sub-agent its
runs would start is refused (an error result on the agent tool call, shared/children.py), and each
of its runs is aborted, with a reason naming the quota, the next time a worker takes it up (a
queued run when it would start, a parked one when it wakes, a running one when a worker takes it
over: ``disabled_reason``).

The running cap keeps tenants from crowding each other out, so it does not apply to the default
tenant (the one an API without auth, a token without a tenant, and the Python producer submit as):
a single-tenant pool runs as many runs at once as its workers hold. Naming "default" in
AGENTMILL_TENANT_QUOTAS gives it a cap after all.
"""

from __future__ import annotations

from functools import cached_property, lru_cache
from pathlib import Path

import orjson
from pydantic import Field

from agentmill_client import limits
from agentmill_client.models import Model
from shared.settings import Settings

__all__ = ["ACTIVE_GRACE_MS", "DEFAULT_TENANT", "NANO_USD", "Quota", "Quotas", "disabled_reason"]

DEFAULT_TENANT = "default"
# a run counted against maxActive whose hash never appeared (refused when created) stops counting after this
ACTIVE_GRACE_MS = 60_000
NANO_USD = 1_000_000_000  # budgets keep costs in Redis as integers of nano-USD (exact sums)


class Quota(Model):
    max_active: int = Field(default=0, ge=0)  # queued + running runs (checked at submission)
    max_running: int = Field(default=0, ge=0)  # running at once (enforced when a worker claims a run)
    submits_per_second: int = Field(default=0, ge=0)  # runs submitted per second (a batch counts each)
    submit_burst: int = Field(default=0, ge=0)  # most runs submitted at once (the token bucket's size)
    max_priority: int = Field(default=limits.MAX_PRIORITY, ge=limits.MIN_PRIORITY, le=limits.MAX_PRIORITY)
    # ^ a run's priority above this is lowered to it (not refused)
    max_children: int = Field(default=0, ge=0)  # child runs one run may start (all its rounds)
    max_descendants: int = Field(default=0, ge=0)  # runs in one root's tree of sub-agents, root not counted
    tokens_per_day: int = Field(default=0, ge=0)  # model tokens (in + out) per UTC day, pool-wide
    cost_usd_per_day: float = Field(default=0.0, ge=0, allow_inf_nan=False)  # USD per UTC day (priced models)
    max_schedules: int = Field(default=0, ge=0)  # schedules (checked at creation)
    schedule_firings_per_minute: int = Field(default=0, ge=0)  # runs its schedules make per UTC minute
    # a concurrency key's limit when a run names none, and the most a run may ask (higher is lowered
    # to it); 0: none (a run with a concurrency key then names its limit)
    concurrency_limit: int = Field(default=0, ge=0, le=limits.MAX_CONCURRENCY_LIMIT)
    disabled: bool = Field(default=False, strict=True)  # no new runs or schedules (403), its schedules held

    @property
    def budgeted(self) -> bool:
        """Whether the tenant has a day budget (tokensPerDay or costUsdPerDay)."""
        return self.tokens_per_day > 0 or self.cost_usd_per_day > 0

    @property
    def burst(self) -> int:
        """The token bucket's size: submitBurst, and never below the per-second rate."""
        return max(self.submit_burst, self.submits_per_second)


class Quotas:
    def __init__(self, settings: Settings) -> None:
        def bucket(q: Quota, burst: int | None) -> Quota:
            """A full batch request always fits in the bucket (or it would be refused forever);
            without a burst of its own, a tenant bursts one batch on top of a second's worth."""
            size = burst or settings.tenant_submit_burst or q.submits_per_second + settings.max_batch
            return q.model_copy(update={"submit_burst": max(size, settings.max_batch)})

        self.default = bucket(
            Quota(
                max_active=settings.tenant_max_active,
                max_running=settings.tenant_max_running,
                submits_per_second=settings.tenant_submits_per_second,
                max_schedules=settings.tenant_max_schedules,
                schedule_firings_per_minute=settings.tenant_schedule_firings_per_minute,
                max_children=settings.tenant_max_children,
                max_descendants=settings.tenant_max_descendants,
            ),
            None,
        )
        self.overrides: dict[str, Quota] = {}
        spec = (settings.tenant_quotas or "").strip()
        if spec:
            raw = orjson.loads(spec if spec.startswith("{") else Path(spec).read_bytes())
            if not isinstance(raw, dict):
                raise ValueError("AGENTMILL_TENANT_QUOTAS must be a JSON object of tenant -> quota")
            for tenant, q in raw.items():
                own = Quota.model_validate(q)
                merged = self.default.model_copy(update=own.model_dump(exclude_unset=True))
                self.overrides[tenant] = bucket(merged, own.submit_burst)
        if DEFAULT_TENANT not in self.overrides:
            self.overrides[DEFAULT_TENANT] = self.default.model_copy(update={"max_running": 0})

    def of(self, tenant: str) -> Quota:
        return self.overrides.get(tenant, self.default)

    @cached_property
    def running_overrides_json(self) -> str:
        """{tenant: maxRunning} for the claim script, "" when no tenant has its own."""
        caps = {
            t: q.max_running for t, q in self.overrides.items() if q.max_running != self.default.max_running
        }
        return orjson.dumps(caps).decode() if caps else ""


@lru_cache(maxsize=16)
def _disabled(spec: str) -> frozenset[str]:
    """The tenants an AGENTMILL_TENANT_QUOTAS value disables (parsed once per value)."""
    spec = spec.strip()
    if not spec:
        return frozenset()
    raw = orjson.loads(spec if spec.startswith("{") else Path(spec).read_bytes())
    if not isinstance(raw, dict):
        return frozenset()
    return frozenset(t for t, q in raw.items() if isinstance(q, dict) and q.get("disabled") is True)


def disabled_reason(settings: Settings, tenant: str) -> str:
    """Why the tenant's runs stop ('' when its quota does not disable it): a lookup once the
    process's quotas are parsed, cheap enough for every run a worker takes up."""
    tenant = tenant or DEFAULT_TENANT
    if tenant not in _disabled(settings.tenant_quotas or ""):
        return ""
    return f'tenant {tenant} is disabled ("disabled": true in AGENTMILL_TENANT_QUOTAS)'
