"""arq's health record follows its partition's master through a failover.

The finding: the record was written through the client bound at start-up to partition 0's master;
after a manual failover that node is a replica, so every poll iteration logged a MovedError for the
rest of the worker's life (runs were unaffected). Now it is written through the partitions'
client, which follows the failover: no MovedError, and the record is fresh on the new master.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
from collections.abc import Iterator
from typing import Any

import pytest

from shared.partitions import Partitions
from shared.settings import Settings
from tests.integration.helpers import running_worker
from tests.support.redis_cluster import LocalRedisCluster
from tests.support.waits import until

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(90),
    pytest.mark.skipif(shutil.which("redis-cli") is None, reason="redis-cli is needed to create a cluster"),
]


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalRedisCluster]:
    with LocalRedisCluster(masters=3, replicas_per_master=1) as c:
        yield c


async def test_health_record_follows_a_failover(
    cluster: LocalRedisCluster, caplog: pytest.LogCaptureFixture
) -> None:
    s = Settings(redis_url=cluster.url, redis_cluster=True)
    parts: Partitions[Any] = Partitions.from_settings(s)
    await parts.start()
    try:
        async with running_worker(cluster.url, redis_cluster=True) as wp:
            await until("the worker polling", lambda: _true(hasattr(wp, "worker")), within=20)
            wp.worker.health_check_interval = 0.2
            key = wp.worker.health_check_key
            part = wp.worker.parts.parts[0]

            async def record() -> bytes | None:
                value: bytes | None = await parts.call(part, lambda c: c.get(key))
                return value

            first = await until("the health record", record, within=10)
            new_master = await asyncio.to_thread(cluster.failover, part.slot)
            caplog.clear()
            with caplog.at_level(logging.WARNING):
                await parts.topology.refresh()

                async def rewritten() -> bool:
                    value = await record()
                    return (
                        value is not None
                        and value != first
                        and parts.topology.address(part.slot) == (f"127.0.0.1:{new_master}")
                    )

                await until("the record rewritten on the new master", rewritten, within=15)
                await asyncio.sleep(1.0)  # five more health records
            moved = [r.getMessage() for r in caplog.records if "MOVED" in r.getMessage().upper()]
            assert moved == []
            ttl = await parts.call(part, lambda c: c.pttl(key))
            assert 0 < ttl <= 1200  # fresh: written within the last interval (0.2 s + 1 s)
    finally:
        await parts.aclose()


async def _true(value: bool) -> bool:
    return value
