"""Concurrency keys on a real Redis Cluster (three masters, 16 partitions): every run of a key lives
on the key's home partition, so the key's slots are counted in one slot and no script spans two;
the keys' homes spread over the masters, and the limit holds on each."""

from __future__ import annotations

import asyncio
import shutil
from collections import Counter

import httpx
import pytest
from redis.asyncio.cluster import RedisCluster

from shared import keys
from tests.integration.api_support import A, api, run_body
from tests.integration.api_support import settings as api_settings
from tests.integration.helpers import running_worker
from tests.support.redis_cluster import LocalRedisCluster
from tests.support.waits import until

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.timeout(180),
    pytest.mark.skipif(
        shutil.which("redis-cli") is None or shutil.which("redis-server") is None,
        reason="redis-server and redis-cli are needed to create a cluster",
    ),
]


async def test_a_keys_limit_holds_on_a_cluster() -> None:
    n_keys, per_key = 12, 6
    with LocalRedisCluster(masters=3, replicas_per_master=0) as cluster:
        s = api_settings(cluster.url, redis_cluster=True)
        rc = RedisCluster.from_url(cluster.url)
        async with api(s) as url, httpx.AsyncClient(base_url=url, headers=A, timeout=30) as http:
            # submitted before any worker is up, so the sampling starts before the first run can end
            runs = [
                run_body(
                    [{"text": "ok", "delayMs": 150}], concurrency={"key": f"user-{i % n_keys}", "limit": 2}
                )
                for i in range(n_keys * per_key)
            ]
            r = await http.post("/v1/runs/batch", json={"runs": runs})
            assert r.status_code == 200, r.text
            ids = [i["runId"] for i in r.json()["results"]]
            layout = keys.Layout(16)
            hashes: dict[str, tuple[str, str]] = {}  # run id -> (its hash's key, its concurrency key)
            for rid, body in zip(ids, runs, strict=True):
                stream = (await http.get(f"/v1/runs/{rid}")).json()["streamKey"]
                part = layout.of_key(stream)
                assert part is layout.home(keys.conc_home(body["concurrency"]["key"]))
                hashes[rid] = (
                    part.run_prefix + stream[len(part.events_prefix) :],
                    body["concurrency"]["key"],
                )
            peak: Counter[str] = Counter()
            ended: set[str] = set()
            seen_running = 0  # (sample, run) pairs in which the run was running

            async def sampled() -> bool:
                nonlocal seen_running
                async with rc.pipeline(transaction=False) as pipe:
                    for h, _ in hashes.values():
                        pipe.hget(h, "status")
                    statuses = await pipe.execute()
                now = Counter(
                    k for (_, k), st in zip(hashes.values(), statuses, strict=True) if st == b"running"
                )
                seen_running += sum(now.values())
                for k, n in now.items():
                    peak[k] = max(peak[k], n)
                ended.update(rid for rid, st in zip(hashes, statuses, strict=True) if st == b"completed")
                await asyncio.sleep(0.01)
                return len(ended) == len(ids)

            sampling = asyncio.create_task(until("every keyed run completes", sampled, 90, every=0))
            try:
                async with (
                    running_worker(cluster.url, redis_cluster=True, max_jobs=20),
                    running_worker(cluster.url, redis_cluster=True, max_jobs=20),
                ):
                    await sampling
            finally:
                sampling.cancel()
        await rc.aclose()
        # the keys' homes are on more than one master
        owners = {
            cluster.master_for_slot(layout.home(keys.conc_home(f"user-{i}")).slot) for i in range(n_keys)
        }
    assert len(owners) > 1
    assert seen_running > 0, "no sample saw a run running: the limit was never observed"
    assert max(peak.values()) == 2, peak
