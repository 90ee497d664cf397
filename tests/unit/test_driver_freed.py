"""A run's driver, and all it holds (its state, its commits, its effects' bookkeeping), is freed by
reference counting when its job ends: no reference cycle leaves it to the collector, whose passes
over a thousand runs' leftovers a worker pays for in CPU and memory."""

from __future__ import annotations

import gc
import weakref

from tests.unit.test_runner import World


async def test_a_finished_runs_driver_is_freed_without_the_collector() -> None:
    w = World([{"text": "hi"}])
    gc.collect()
    gc.disable()
    try:
        driver, _ = w.driver()
        assert await driver.run() == "completed"
        gone, commits = weakref.ref(driver), weakref.ref(driver.out)
        del driver
        assert gone() is None and commits() is None
    finally:
        gc.enable()
