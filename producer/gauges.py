"""The cluster-wide gauges the API exports (producer/api/metrics.py), read from Redis at each scrape:
queue depth (in all and per priority), scheduled runs, runs awaiting approval, and the scaling signal.

``slots_wanted`` is what a worker pool should hold to carry the load now: the jobs a worker could
claim now plus the runs running. A queued job whose tenant already runs its ``maxRunning`` on that
partition is not claimable (shared/lua/claim_jobs.lua holds it back), so per partition and capped
tenant ``held = max(0, queued - max(0, cap - running))`` is left out. The tenants looked at are the
ones the API knows (its tokens' and the quota file's); a tenant it does not know counts as uncapped.
One read-only script call per partition (shared/lua/scaling.lua), one pipelined round trip per node.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from agentmill_client import limits
from shared.calls.dispatch import Scaling
from shared.functions import each_with_reload
from shared.keys import Partition
from shared.partitions import Partitions
from shared.quotas import Quotas
from shared.scripts import Scripts

__all__ = ["ClusterGauges", "held_back", "read_gauges", "running_caps"]


@dataclass(frozen=True, slots=True)
class ClusterGauges:
    queue_depth: int  # jobs queued on the partitions (in the arq queues or held back)
    running: int  # runs carried by a worker whose lease is unexpired
    awaiting: int  # runs waiting for a human decision (on no worker)
    held: int  # queued jobs a tenant's running cap holds back
    scheduled: int = 0  # runs whose runAt is still ahead (not in queue_depth)
    by_priority: tuple[int, ...] = (0,) * (limits.MAX_PRIORITY + 1)  # queue_depth per priority 0 … 9

    @property
    def slots_wanted(self) -> int:
        return self.queue_depth - self.held + self.running


def held_back(queued: int, tenants: Iterable[tuple[int, int, int]]) -> int:
    """The queued jobs of one partition its tenants' running caps hold back, from each capped
    tenant's (cap, queued, running) there; never more than the queue holds."""
    held = sum(max(0, q - max(0, cap - r)) for cap, q, r in tenants)
    return min(held, queued)


def running_caps(quotas: Quotas, tenants: Iterable[str]) -> dict[str, int]:
    """{tenant: maxRunning} of the known tenants that have a running cap."""
    known = {*tenants, *quotas.overrides}
    return {t: cap for t in sorted(known) if (cap := quotas.of(t).max_running) > 0}


async def read_gauges(
    parts: Partitions[Any], scripts: Scripts, caps: Mapping[str, int], *, deadline_s: float = 2.0
) -> ClusterGauges:
    """Raises what Redis raises: a scrape that cannot read Redis exports none of these gauges."""
    names = list(caps)

    call = Scaling(tuple(names))

    def op(pipe: Any, part: Partition) -> None:
        k, a = scripts.framing.frame(part, call.keys(part), call.argv())
        scripts.scaling.queue(pipe, k, a)

    depth = running = awaiting = held = scheduled = 0
    lanes = [0] * (limits.MAX_PRIORITY + 1)
    for (reply,) in await each_with_reload(parts, scripts.scaling, op, deadline_s=deadline_s):
        q, r, w, s, *rest = (int(x) for x in reply)
        depth, running, awaiting, scheduled = depth + q, running + r, awaiting + w, scheduled + s
        per_priority, per_tenant = rest[: len(lanes)], rest[len(lanes) :]
        lanes = [a + b for a, b in zip(lanes, per_priority, strict=True)]
        held += held_back(
            q, ((caps[t], per_tenant[2 * i], per_tenant[2 * i + 1]) for i, t in enumerate(names))
        )
    return ClusterGauges(depth, running, awaiting, held, scheduled, tuple(lanes))
