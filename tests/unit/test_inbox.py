"""The run's inbox (worker/runner/inbox.py): items in order, a waiting reader woken by a put, a
cancelled wait leaving nothing behind."""

from __future__ import annotations

import asyncio

from worker.runner.inbox import Inbox


async def test_items_come_out_in_order_and_a_waiting_reader_wakes() -> None:
    box: Inbox[int] = Inbox()
    box.put_nowait(1)
    box.put_nowait(2)
    assert [await box.get(), await box.get()] == [1, 2] and len(box) == 0
    reader = asyncio.ensure_future(box.get())
    await asyncio.sleep(0)
    assert not reader.done()
    box.put_nowait(3)
    box.put_nowait(4)
    assert await asyncio.wait_for(reader, 1) == 3 and await box.get() == 4


async def test_a_cancelled_wait_loses_no_item() -> None:
    box: Inbox[str] = Inbox()
    reader = asyncio.ensure_future(box.get())
    await asyncio.sleep(0)
    reader.cancel()
    await asyncio.gather(reader, return_exceptions=True)
    box.put_nowait("kept")  # after the cancel: no waiter to wake, the item stays
    assert await asyncio.wait_for(box.get(), 1) == "kept"


async def test_a_wait_within_a_time_gives_none_when_nothing_comes_and_the_item_when_it_does() -> None:
    box: Inbox[str] = Inbox()
    assert await box.get_within(0.01) is None  # nothing put: the time passed
    reader = asyncio.ensure_future(box.get_within(5.0))
    await asyncio.sleep(0)
    box.put_nowait("woke")
    assert await asyncio.wait_for(reader, 1) == "woke"
    box.put_nowait("early")  # already there: no wait at all
    assert await box.get_within(0.0) == "early" and len(box) == 0
    box.put_nowait("after")  # a timed-out wait left no waiter behind: the item stays for the next get
    assert await asyncio.wait_for(box.get(), 1) == "after"
