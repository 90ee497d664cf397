"""A run's usage, tallied with its terminal commit into its tenant's usage hash of the UTC day it
ended (keys.Partition.usage_day; GET /v1/usage sums them over the partitions): tokens in and out,
cost in nano-USD, cache reads and writes, and one run, per agent. A run ended outside its worker is
tallied the same way by the script that ends it (usage_add in shared/lua/prelude.lua's finalize), if
it started."""

from __future__ import annotations

import functools

from agentmill_client.models import RunResult, Usage
from shared.clock import utc_day
from shared.fields import EconomyUsagePart, UsagePart, usage_field
from shared.quotas import DEFAULT_TENANT, NANO_USD
from worker.core.commit_step import UsageTally
from worker.machine import RunState

__all__ = ["usage_tally"]

# The parts a run adds to, in the order of its increments: its own, then the economy lane's, then
# its run (commit.lua finds the economy terms, for the run hash and its batch, just before that last one).
_PARTS = (
    UsagePart.IN, UsagePart.OUT, UsagePart.COST, UsagePart.CACHE_READ, UsagePart.CACHE_WRITE,
    EconomyUsagePart.IN, EconomyUsagePart.OUT, EconomyUsagePart.COST, EconomyUsagePart.CACHE_READ,
    EconomyUsagePart.CACHE_WRITE, EconomyUsagePart.RUNS, UsagePart.RUNS,
)  # fmt: skip


@functools.lru_cache(maxsize=4096)
def _fields(agent: str) -> tuple[str, ...]:
    """The agent's fields of the usage hash, in ``_PARTS``' order: an agent's, not a run's."""
    return tuple(usage_field(agent, part) for part in _PARTS)


def usage_tally(
    state: RunState, result: RunResult, tenant: str, now_ms: int, retention_days: int
) -> UsageTally | None:
    cfg = state.config
    if cfg is None:  # it never started (no configuration): nothing to tally
        return None
    u = result.usage or Usage()
    f = _fields(cfg.agent)
    added = [
        (f[0], u.input_tokens),
        (f[1], u.output_tokens),
        (f[2], round((u.cost_usd or 0.0) * NANO_USD)),
        (f[3], u.cache_read_tokens),
        (f[4], u.cache_write_tokens),
    ]
    if (e := state.economy_usage) is not None:  # the calls a provider batch answered
        added += [
            (f[5], e.input_tokens),
            (f[6], e.output_tokens),
            (f[7], round((e.cost_usd or 0.0) * NANO_USD)),
            (f[8], e.cache_read_tokens),
            (f[9], e.cache_write_tokens),
        ]
    added.append((f[10], int(cfg.lane == "economy")))
    # Only what the run adds (no cost without prices): one HINCRBY fewer a run; runs always +1, last.
    increments = [(k, n) for k, n in added if n] + [(f[11], 1)]
    return UsageTally(tenant or DEFAULT_TENANT, utc_day(now_ms), increments, retention_days * 86_400)
