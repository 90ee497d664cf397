"""A run's usage, tallied with its terminal commit into its tenant's usage hash of the UTC day it
ended (keys.Partition.usage_day; GET /v1/usage sums them over the partitions): tokens in and out,
cost in nano-USD, cache reads and writes, and one run, per agent. A run ended outside its worker is
tallied the same way by the script that ends it (usage_add in shared/lua/prelude.lua's finalize), if
it started."""

from __future__ import annotations

from agentmill_client.models import RunResult, Usage
from shared.clock import utc_day
from shared.fields import EconomyUsagePart, UsagePart, usage_field
from shared.quotas import DEFAULT_TENANT, NANO_USD
from worker.core.commit_step import UsageTally
from worker.machine import RunState

__all__ = ["usage_tally"]


def usage_tally(
    state: RunState, result: RunResult, tenant: str, now_ms: int, retention_days: int
) -> UsageTally | None:
    cfg = state.config
    if cfg is None:  # it never started (no configuration): nothing to tally
        return None
    u = result.usage or Usage()
    a = cfg.agent
    added: tuple[tuple[str, int], ...] = (
        (usage_field(a, UsagePart.IN), u.input_tokens),
        (usage_field(a, UsagePart.OUT), u.output_tokens),
        (usage_field(a, UsagePart.COST), round((u.cost_usd or 0.0) * NANO_USD)),
        (usage_field(a, UsagePart.CACHE_READ), u.cache_read_tokens),
        (usage_field(a, UsagePart.CACHE_WRITE), u.cache_write_tokens),
    )
    e = state.economy_usage or Usage()
    added += (
        (usage_field(a, EconomyUsagePart.IN), e.input_tokens),
        (usage_field(a, EconomyUsagePart.OUT), e.output_tokens),
        (usage_field(a, EconomyUsagePart.COST), round((e.cost_usd or 0.0) * NANO_USD)),
        (usage_field(a, EconomyUsagePart.CACHE_READ), e.cache_read_tokens),
        (usage_field(a, EconomyUsagePart.CACHE_WRITE), e.cache_write_tokens),
        (usage_field(a, EconomyUsagePart.RUNS), int(cfg.lane == "economy")),
    )
    # Only what the run adds (no cost without prices): one HINCRBY fewer a run; runs always +1, last.
    # commit.lua finds the economy terms (for the run hash and its batch) just before that last one.
    increments = [(f, n) for f, n in added if n] + [(usage_field(a, UsagePart.RUNS), 1)]
    return UsageTally(tenant or DEFAULT_TENANT, utc_day(now_ms), increments, retention_days * 86_400)
