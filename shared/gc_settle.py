"""The collector of a long-lived process (a worker, the API): what start-up built is frozen, and
young collections run less often, so that no collection walks the whole process inside one turn of
its event loop.

Python's defaults are (700, 10, 10). Young collections every 20,000 allocations; their survivors
(mostly objects of runs in flight) move on after two of them, so no middle generation grows to
the size of thousands of runs (a collection of it took 70 ms at 2,000 in flight). At 50,000 a
middle collection held the loop 40-55 ms at 2,000 in flight, at 20,000 14-25 ms, for the same
collector time in all (77-98 ms in 13 passes against 80-98 ms in 6; 10,000: 13 passes, 27 ms,
against 3 passes, 13 ms at 50,000 while 1,000 runs started and ended).

The API had neither: a full collection there walked FastAPI's and pydantic's objects, every module
and the settings, about 100 ms of one turn under an attacker's forks (0.9 MB states parsed into
objects at every request), while every other tenant's request waited.
"""

from __future__ import annotations

import gc

__all__ = ["GC_THRESHOLDS", "settle_gc"]

GC_THRESHOLDS = (20_000, 2, 10)


def settle_gc() -> None:
    """What start-up built (modules, settings, profiles, the app) lives as long as the process: the
    collector stops scanning it. With a thousand runs in flight, full collections walking all of it
    took up to 200 ms (event-loop lag) and much of the worker's CPU. Objects are freed by reference
    counting (the collector is there for their cycles), so it runs less often (GC_THRESHOLDS)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
