"""``agentmill_schedule_firing_lag_seconds{tenant}``: how long after its due time each firing's run
was made, observed by the firer that made it (a worker's or an API process's registry).

The tenant label is bounded: the first MAX_TENANT_LABELS tenants a process sees get their own
series, the others share ``other`` (tenants are few; a pool with more reads the lag of the first
ones and of the rest together)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Histogram

__all__ = ["LAG_BUCKETS", "MAX_TENANT_LABELS", "OTHER", "FiringLag"]

LAG_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300)
MAX_TENANT_LABELS = 100
OTHER = "other"


class FiringLag:
    """The histogram, on ``registry``."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.histogram = Histogram(
            "agentmill_schedule_firing_lag_seconds",
            "Time from a schedule firing's due time to its run being made, by the schedule's tenant "
            f"(the first {MAX_TENANT_LABELS} tenants this process saw; the others as `other`).",
            ["tenant"],
            buckets=LAG_BUCKETS,
            registry=registry,
        )
        self.seen: set[str] = set()

    def observe(self, tenant: str, seconds: float) -> None:
        if tenant not in self.seen and len(self.seen) < MAX_TENANT_LABELS:
            self.seen.add(tenant)
        self.histogram.labels(tenant if tenant in self.seen else OTHER).observe(max(0.0, seconds))
