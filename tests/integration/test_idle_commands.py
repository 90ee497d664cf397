"""What a worker with no runs sends Redis: its lease renewed less often than while it carries runs
(no abort to read in its inbox, the lease far from its end), and a run that starts brings the
beats back at once; the worker's other looks do not read what they need not (a schedule firer's
look reads older versions' due set only now and then: tests/integration/test_schedules.py).
Counted with MONITOR on a real worker process."""

from __future__ import annotations

import asyncio
import time

import pytest
from redis.asyncio import Redis

from tests.integration.helpers import producer_for, script_run, until_status
from tests.support.procs import workers
from tests.support.schema import K
from worker.process.lease_keeping import idle_beat_ms

pytestmark = pytest.mark.integration

HEARTBEAT_MS = 200
ENV = {"AGENTMILL_HEARTBEAT_MS": str(HEARTBEAT_MS), "AGENTMILL_POLL_DELAY_S": "0.05"}


async def _beats(redis: Redis, seconds: float) -> list[float]:
    """The times (s, this clock) of the heartbeats Redis ran in the next ``seconds``."""
    at: list[float] = []
    async with redis.monitor() as m:

        async def count() -> None:
            async for cmd in m.listen():
                if str(cmd.get("command", "")).startswith("FCALL beat_"):
                    at.append(time.monotonic())

        counter = asyncio.create_task(count())
        await asyncio.sleep(seconds)
        counter.cancel()
        await asyncio.gather(counter, return_exceptions=True)
    return at


def test_an_idle_worker_beats_every_four_heartbeats_within_a_sixth_of_its_lease() -> None:
    assert idle_beat_ms(500, 30_000) == 2_000
    assert idle_beat_ms(500, 6_000) == 1_000  # a sixth of a short lease
    assert idle_beat_ms(500, 1_500) == 500  # never more often than a heartbeat


async def test_a_worker_with_no_runs_beats_less_often_and_a_run_brings_its_beats_back(
    redis: Redis, redis_url: str
) -> None:
    idle_s = idle_beat_ms(HEARTBEAT_MS, 30_000) / 1000  # 0.8 s
    with workers(redis_url, 1, env=ENV):
        for _ in range(200):
            if await redis.zcard(K.workers) >= 1:
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(1.0)
        idle = await _beats(redis, 4 * idle_s)
        print(f"idle: {len(idle)} beats in {4 * idle_s:.1f} s")
        assert 3 <= len(idle) <= 5, idle  # one every 0.8 s, not every 0.2 s (16)

        p = producer_for(redis, redis_url)
        sub = await p.submit(script_run([{"toolCalls": [{"name": "sleep", "arguments": {"ms": 2500}}]}]))
        await until_status(redis, sub.run_id, "running")
        busy = await _beats(redis, 1.6)
        print(f"with a run: {len(busy)} beats in 1.6 s")
        assert len(busy) >= 6, busy  # every heartbeat (8), not every 0.8 s (2)
        await until_status(redis, sub.run_id, "completed", within=10)
