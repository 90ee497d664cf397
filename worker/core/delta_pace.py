"""How often a streaming run's deltas go out.

Each flush of a run's buffered ``model_delta`` events is a round trip and a script call
(publish.lua): about 50 µs of worker CPU and 20-30 µs of Redis CPU. At one flush every
``AGENTMILL_DELTA_FLUSH_MS`` (50 ms) a run streams twenty a second, so a thousand runs streaming at
once would need more than a core for their flushes alone and the worker would fall behind its
model streams. The pace keeps one worker's flushes near ``AGENTMILL_DELTA_FLUSH_PER_S`` in all:
with ``n`` runs streaming, each flushes every ``max(flush_ms, n / per_s)``. A few runs stream as
before; many stream in coarser pieces, and every piece still goes out, in order."""

from __future__ import annotations

__all__ = ["DeltaPace"]


class DeltaPace:
    """The worker's open model streams and the flush interval they get (one per process)."""

    __slots__ = ("base_s", "open", "per_s")

    def __init__(self, flush_ms: int, per_s: int) -> None:
        self.base_s = flush_ms / 1000.0
        self.per_s = float(per_s)
        self.open = 0  # model streams open in this process

    def interval_s(self) -> float:
        return max(self.base_s, self.open / self.per_s)
