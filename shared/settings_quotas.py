"""The default quotas of every tenant (``AGENTMILL_TENANT_*``), the part of the process settings that
shared/quotas.py reads; a tenant's own overrides come from ``AGENTMILL_TENANT_QUOTAS``. ``Settings``
(shared/settings.py) holds them with the rest, so docs/settings.md lists them first."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["TenantQuotaSettings"]


class TenantQuotaSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="AGENTMILL_", extra="ignore", populate_by_name=True)

    tenant_max_active: int = Field(
        default=10_000,
        description="queued + running runs per tenant; beyond, submissions get 429 `quota_exceeded`",
    )
    tenant_max_running: int = Field(
        default=100,
        description="runs of one tenant running at once (enforced when workers claim jobs); `0` no limit; "
        "not applied to the `default` tenant (auth off, the Python producer) unless "
        "`AGENTMILL_TENANT_QUOTAS` names it",
    )
    tenant_submits_per_second: int = Field(
        default=1_000,
        description="runs a tenant may submit per second (the refill rate of its token bucket; a batch "
        "counts each); beyond, 429 `rate_limited` with `Retry-After`",
    )
    tenant_submit_burst: int = Field(
        default=0,
        description="most runs a tenant may submit at once (the bucket's size); 0 = a second's worth plus "
        "`AGENTMILL_MAX_BATCH`; never below `AGENTMILL_MAX_BATCH`: a full batch request always fits",
    )
    tenant_max_schedules: int = Field(
        default=100,
        ge=0,
        description="schedules per tenant; beyond, `POST /v1/schedules` gets 429 `schedule_quota_exceeded`; "
        "`0` no limit",
    )
    tenant_schedule_firings_per_minute: int = Field(
        default=600,
        ge=0,
        description="runs a tenant's schedules make per minute, all together (pool-wide, per UTC minute); "
        "a firing beyond is skipped (counted in the schedule's `skipped`, its `lastError` naming the "
        "cap), not made later; `0` no limit",
    )
    tenant_max_children: int = Field(
        default=20,
        ge=0,
        description="child runs (sub-agents) one run may start, over all its rounds; beyond, the agent tool "
        "call gets an error result naming the cap and the run carries on; `0` no limit",
    )
    tenant_max_descendants: int = Field(
        default=100,
        ge=0,
        description="runs in one root run's tree of sub-agents (its children, theirs, …; the root not "
        "counted); beyond, the agent tool call gets an error result naming the cap; `0` no limit",
    )
    tenant_quotas: str | None = Field(
        default=None,
        description='per-tenant overrides, JSON or a JSON file: `{"tenant": {"maxActive", "maxRunning", '
        '"submitsPerSecond", "submitBurst", "maxPriority", "maxChildren", "maxDescendants", "tokensPerDay", '
        '"costUsdPerDay", "maxSchedules", "scheduleFiringsPerMinute", "concurrencyLimit"}}` (tokensPerDay and '
        "costUsdPerDay: the tenant's budget per UTC day, pool-wide; 0 = none; concurrencyLimit: a "
        "concurrency key's limit when a run names none, and the most one may ask)",
    )
    key_max_waiting: int = Field(
        default=10_000,
        ge=1,
        description="most runs waiting on one caller's key: for a slot of a concurrency key "
        "(`RunInput.concurrency`; beyond, 429 `concurrency_full`), or with a start given by a rate key "
        "(`RunInput.rate`, the starts within its period and ahead; beyond, 429 `rate_full`)",
    )
