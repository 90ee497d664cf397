"""A drain reads what the run's effects posted before it hands the run back: a tool call that ended
while the loop was busy has its result written, not run again by the next worker."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.unit.test_runner import World


async def test_a_result_posted_before_the_drain_looks_is_written_not_run_again() -> None:
    w = World([{"toolCalls": [{"id": "c1", "name": "sleep", "arguments": {"ms": 20}}]}, {"text": "done"}])
    driver, _ = w.driver()
    apply = driver._apply
    drained: list[bool] = []

    async def then_drain(ev: Any) -> Any:
        out = await apply(ev)
        claimed = w.run.tools.get("c1.0", {}).get("state") == "pending"
        if claimed and driver.tasks and not drained:  # the step that started the call: let it end, then drain
            await asyncio.gather(*driver.tasks)
            for _ in range(3):  # its done-callback posts to the inbox
                await asyncio.sleep(0)
            assert not driver.tasks and len(driver.inbox) >= 1  # its result waits, unread
            driver.drain()
            drained.append(True)
        return out

    driver._apply = then_drain  # type: ignore[method-assign]
    assert await asyncio.wait_for(driver.run(), 5) == "released"
    assert drained and w.run.tools["c1.0"]["state"] == "done"  # written before the run was handed back
    again, _ = w.driver()
    assert await asyncio.wait_for(again.run(), 5) == "completed"
    assert w.tools.executed == ["c1.0"]  # once: the next worker served the recorded result
