"""The loop watchdog (tests/support/loop_watchdog.py) reports a loop held by a synchronous call,
with the stack that held it, and not a loop that waits idle."""

from __future__ import annotations

import asyncio
import time

from tests.support.loop_watchdog import Watchdog, WatchedLoop, task_stacks


def run_watched(dog: Watchdog, coro_fn: object) -> None:
    loop = WatchedLoop()
    dog.watch(loop)
    try:
        loop.run_until_complete(coro_fn())  # type: ignore[operator]
    finally:
        loop.close()


def test_a_blocking_call_is_a_stall_with_its_stack_and_an_idle_wait_is_not() -> None:
    dog = Watchdog(0.2, None)

    async def idle() -> None:
        await asyncio.sleep(0.6)

    async def holds_the_loop() -> None:
        await asyncio.sleep(0.05)
        time.sleep(0.7)

    dog.where = "idle"
    run_watched(dog, idle)
    assert dog.take() == []

    dog.where = "blocked"
    run_watched(dog, holds_the_loop)
    stalls = dog.take()
    assert len(stalls) == 1, [s.text() for s in stalls]
    (stall,) = stalls
    assert stall.where == "blocked" and stall.seconds >= 0.2
    assert stall.samples and "holds_the_loop" in stall.samples[0][1], stall.text()
    assert "time.sleep(0.7)" in stall.samples[0][1]
    if stall.cpu_s is not None and stall.wait_s is not None:  # Linux: the thread slept, it did not spin
        assert stall.cpu_s < 0.3, stall.text()
    assert stall.text().startswith("loop stalled")


async def test_task_stacks_name_where_each_task_waits() -> None:
    gate = asyncio.Event()

    async def drain() -> None:
        await gate.wait()

    task = asyncio.create_task(drain(), name="worker")
    await asyncio.sleep(0)
    text = task_stacks({task})
    gate.set()
    await task
    assert text.startswith("worker: ") and "drain" in text and "Event.wait" in text, text
