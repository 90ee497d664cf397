"""Producer.wait, told by the run's event stream: each time an event wakes it, the run's record is
read in the same round trip (the XREAD and the HMGET behind it, pipelined on one connection), so a
waiter returns one round trip after the run's end reached Redis, not two."""

from __future__ import annotations

from typing import Any

import pytest
from redis.asyncio import Connection, ConnectionPool, Redis

from agentmill_client.models import RunStatus
from tests.integration.helpers import producer_for, script_run, wait_all
from tests.support.procs import workers

pytestmark = pytest.mark.integration


class Counted(Connection):
    """Counts what is sent: every write, and the writes holding an XREAD."""

    sends: list[bool] = []  # shared by every connection of the test's pools

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        chunks = [command] if isinstance(command, bytes) else list(command)
        Counted.sends.append(any(b"XREAD" in bytes(c) for c in chunks))
        await super().send_packed_command(command, check_health)


async def test_a_waiter_reads_the_record_in_the_round_trip_that_wakes_it(
    redis: Redis, redis_url: str
) -> None:
    counted = Redis(connection_pool=ConnectionPool.from_url(redis_url, connection_class=Counted))
    try:
        p = producer_for(counted, redis_url)
        with workers(redis_url, 1):
            for _ in range(5):
                # its reply takes 200 ms: the waiter is blocked on the stream when the run ends
                sub = await p.submit(script_run([{"text": "a", "delayMs": 200}]))
                Counted.sends.clear()
                rec = await p.wait(sub.run_id, timeout_s=20)
                assert rec is not None and rec.status == RunStatus.COMPLETED and rec.result is not None
                wakes = sum(Counted.sends)
                # one read first, then one round trip each time the stream wakes it (none after)
                assert wakes >= 1 and len(Counted.sends) == 1 + wakes, Counted.sends
                # a record the caller has just read (the API's /wait reads one for its 404) is not read again
                Counted.sends.clear()
                assert await p.wait(sub.run_id, timeout_s=20, read=rec) is rec and Counted.sends == []
            # and many waiters at once all see their runs end
            subs = [await p.submit(script_run([{"text": "x", "delayMs": 50}])) for _ in range(10)]
            recs = await wait_all(p, [s.run_id for s in subs], 20)
            assert all(r.status == RunStatus.COMPLETED for r in recs.values())
    finally:
        await counted.aclose()
