"""A run's effects: the ones already ended are not waited for when the run stops them, and the
driver they fence is reached through a weak reference."""

from __future__ import annotations

import asyncio
import gc

import pytest

from worker.runner.effect_tasks import EffectTasks, Wake


class _Driver:
    def __init__(self) -> None:
        self.fenced: list[bool] = []

    def fence(self, *, deleted: bool = False) -> None:
        self.fenced.append(deleted)


async def test_an_effect_already_ended_is_not_waited_for() -> None:
    posted: list[Wake] = []
    effects = EffectTasks("r1", posted.append, _Driver())

    async def replied() -> None:
        return None

    effects.spawn(replied())
    await asyncio.sleep(0)  # the effect ran and ended; its done callback has not run yet
    (task,) = effects.tasks
    assert task.done()
    stopping = effects.cancelled()
    with pytest.raises(StopIteration):  # done without a turn of the loop
        stopping.send(None)
    await asyncio.sleep(0)
    assert not effects.tasks and len(posted) == 1  # its done callback still ran


async def test_an_effect_still_running_is_cancelled_and_awaited() -> None:
    effects = EffectTasks("r1", lambda _: None, _Driver())
    effects.spawn(asyncio.sleep(10))
    await asyncio.sleep(0)
    (task,) = effects.tasks
    await effects.cancelled()
    assert task.cancelled()


def test_the_driver_is_fenced_while_it_lives_and_not_kept_alive() -> None:
    driver = _Driver()
    effects = EffectTasks("r1", lambda _: None, driver)
    effects.fence(True)
    assert driver.fenced == [True]
    del driver
    gc.collect()
    effects.fence(False)  # gone: nothing to fence
