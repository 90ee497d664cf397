"""The worker's share of the pool's minute-by-minute activity (shared/pool_stats.py).

``PoolReport`` reads the worker's own run counters (its Prometheus registry: the observer already
counts every start and end, so nothing is added to a run's path) and, every ``REPORT_S``, adds what
changed since the last report to the current minute's hash on partition 0: one pipelined round trip.
A report that fails is carried into the next one, so counts are late rather than lost.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry
from redis.exceptions import RedisError

from shared.partitions import Partitions
from shared.pool_stats import FIELDS, KEEP_S, REPORT_S, minute_of

__all__ = ["PoolReport"]

log = logging.getLogger("agentmill.worker")

_SAMPLES = {  # field -> (sample name, labels) in the worker's registry (worker/telemetry/metrics.py)
    "started": ("agentmill_runs_started_total", {"resumed": "false"}),
    "completed": ("agentmill_runs_finished_total", {"status": "completed"}),
    "failed": ("agentmill_runs_finished_total", {"status": "failed"}),
    "aborted": ("agentmill_runs_finished_total", {"status": "aborted"}),
}
assert set(_SAMPLES) == set(FIELDS)


class PoolReport:
    def __init__(
        self,
        parts: Partitions[Any],
        registry: CollectorRegistry,
        *,
        now_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        self.parts = parts
        self.registry = registry
        self.now_ms = now_ms
        self.reported = self._totals()  # what earlier reports covered

    def _totals(self) -> dict[str, int]:
        out = {}
        for f, (name, labels) in _SAMPLES.items():
            out[f] = int(self.registry.get_sample_value(name, labels) or 0)
        return out

    async def report(self) -> dict[str, int]:
        """Add what changed since the last report to this minute's hash; what was added."""
        now = self._totals()
        delta = {f: now[f] - self.reported[f] for f in FIELDS if now[f] != self.reported[f]}
        if not delta:
            return {}
        part = self.parts.parts[0]
        key = part.pool_minute(minute_of(self.now_ms()))

        def queue(pipe: Any) -> None:
            for f, n in delta.items():
                pipe.hincrby(key, f, n)
            pipe.expire(key, KEEP_S)

        await self.parts.pipelined([(part, queue)], deadline_s=REPORT_S)
        self.reported = now
        return delta

    async def run_forever(self, every_s: float = REPORT_S) -> None:
        while True:
            await asyncio.sleep(every_s)
            try:
                await self.report()
            except (RedisError, OSError) as exc:
                log.warning("pool report failed (carried into the next): %s", exc)
