"""Topology against a real Redis Cluster (3 masters, 3 replicas, node timeout 1 s) started by
LocalRedisCluster, and against a single redis-server: slot routing, EVALSHA and MULTI/EXEC on one
slot, and rebinding after a manual failover and after a master is killed."""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import AsyncIterator, Iterator

import pytest
from redis.asyncio import Redis
from redis.exceptions import AuthenticationError, MovedError, ResponseError
from redis.exceptions import ConnectionError as RedisConnectionError

from shared.keys import slot_of
from shared.partitions import partition_count
from shared.settings import Settings
from shared.topology import Topology, is_retryable
from tests.support.redis_cluster import LocalRedisCluster
from tests.support.redis_server import RedisServer

# One process runs the module (--dist loadgroup): its cluster is module-scoped, and spread over the
# test processes each built a cluster of its own.
pytestmark = [pytest.mark.integration, pytest.mark.timeout(90), pytest.mark.xdist_group("topology")]


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalRedisCluster]:
    if shutil.which("redis-server") is None or shutil.which("redis-cli") is None:
        pytest.skip("a Redis Cluster needs redis-server and redis-cli on PATH (bin/dev installs them)")
    t0 = time.monotonic()
    with LocalRedisCluster(masters=3, replicas_per_master=1, node_timeout_ms=1000) as c:
        print(f"cluster of {len(c.ports)} nodes up in {time.monotonic() - t0:.2f} s")
        yield c


@pytest.fixture
async def topo(cluster: LocalRedisCluster) -> AsyncIterator[Topology[Redis]]:
    t = Topology(Settings(redis_url=cluster.url, redis_cluster=True), retries=3)
    await t.start()
    try:
        yield t
    finally:
        await t.aclose()


def addr(port: int) -> str:
    return f"127.0.0.1:{port}"


async def test_slots_map_to_their_owners(cluster: LocalRedisCluster, topo: Topology[Redis]) -> None:
    assert topo.is_cluster and partition_count(topo.settings) == 16
    assert sorted(topo.address(m.slots[0][0]) or "" for m in cluster.masters()) == sorted(
        addr(m.port) for m in cluster.masters()
    )
    assert len(topo.clients()) == 3
    for i in range(40):
        key = f"route:{i}"
        slot = slot_of(key)
        assert await topo.for_slot(0).execute_command("CLUSTER KEYSLOT", key) == slot
        assert topo.address(slot) == addr(cluster.master_for_slot(slot))
        client = topo.for_slot(slot)
        await client.set(key, i)
        assert await client.get(key) == str(i).encode()
    slot = slot_of("route:0")
    wrong = next(c for c in topo.clients() if c is not topo.for_slot(slot))
    with pytest.raises(MovedError) as moved:
        await wrong.set("route:0", "x")
    assert (moved.value.slot_id, moved.value.port) == (slot, cluster.master_for_slot(slot))


async def test_evalsha_of_two_keys_with_one_hash_tag(topo: Topology[Redis]) -> None:
    keys = ["{acct:7}:balance", "{acct:7}:log"]
    slot = slot_of(keys[0])
    assert slot_of(keys[1]) == slot
    script = "redis.call('INCRBY', KEYS[1], ARGV[1]); return redis.call('RPUSH', KEYS[2], ARGV[1])"
    client = topo.for_slot(slot)
    sha = await client.script_load(script)
    assert await client.evalsha(sha, 2, *keys, "5") == 1
    assert await topo.call(slot, lambda c: c.evalsha(sha, 2, *keys, "7")) == 2
    assert await client.get(keys[0]) == b"12"


async def test_multi_exec_on_one_slot(topo: Topology[Redis]) -> None:
    async def tx(c: Redis) -> list[object]:
        async with c.pipeline(transaction=True) as p:
            p.set("{tx}:a", 1).incrby("{tx}:b", 2).mget("{tx}:a", "{tx}:b")
            return await p.execute()

    assert await topo.call(slot_of("{tx}"), tx) == [True, 2, [b"1", b"2"]]
    wrong = next(c for c in topo.clients() if c is not topo.for_slot(slot_of("{tx}")))
    with pytest.raises(MovedError):  # typed even inside EXEC's abort (the node clients' parser)
        await tx(wrong)


def test_retryable_errors() -> None:
    moved = "Command # 1 (SET k 1) of pipeline caused error: ('MOVED 7 127.0.0.1:7001',)"
    assert is_retryable(ResponseError(moved)) and is_retryable(ResponseError("TRYAGAIN x"))
    assert is_retryable(ConnectionError("reset")) and is_retryable(RedisConnectionError("refused"))
    assert not is_retryable(ResponseError("WRONGTYPE x")) and not is_retryable(AuthenticationError("no"))


async def test_refreshes_are_shared_and_spaced(topo: Topology[Redis]) -> None:
    loop = asyncio.get_running_loop()
    before, t0 = topo.refreshes, loop.time()
    assert await asyncio.gather(*(topo.refresh() for _ in range(10))) == [False] * 10
    assert topo.refreshes == before + 1
    await topo.refresh()
    assert topo.refreshes == before + 2 and loop.time() - t0 >= 0.2


def test_node_stats_count_commands(cluster: LocalRedisCluster) -> None:
    import redis

    slot = slot_of("{stats}")
    port = cluster.master_for_slot(slot)
    before = cluster.node_stats()
    assert sorted(s["role"] for s in before.values()) == ["master"] * 3 + ["replica"] * 3
    with redis.Redis(port=port) as c:
        for i in range(200):
            c.set(f"{{stats}}:{i}", i)
    after = cluster.node_stats()
    assert after[port]["commands"] >= before[port]["commands"] + 200
    assert after[port]["keys"] >= before[port]["keys"] + 200 and after[port]["cpu_s"] >= before[port]["cpu_s"]


async def test_call_follows_a_manual_failover(cluster: LocalRedisCluster, topo: Topology[Redis]) -> None:
    slot = slot_of("{fo}")
    old = cluster.master_for_slot(slot)
    assert topo.address(slot) == addr(old)
    await topo.call(slot, lambda c: c.set("{fo}:k", "v"))
    t0 = time.monotonic()
    new = await asyncio.to_thread(cluster.failover, slot)
    t1 = time.monotonic()
    assert new != old and cluster.master_for_slot(slot) == new
    assert await topo.call(slot, lambda c: c.get("{fo}:k"), deadline_s=10) == b"v"
    print(f"manual failover {t1 - t0:.2f} s; first call after it {time.monotonic() - t1:.3f} s")
    assert topo.address(slot) == addr(new)  # rebound by the MOVED at once
    await topo.refresh()  # the map read it started confirms it
    assert topo.address(slot) == addr(new) and topo.for_slot(slot) in topo.clients()


async def test_call_rides_out_a_killed_master(cluster: LocalRedisCluster) -> None:
    slot = slot_of("{kill}")
    seed = f"redis://127.0.0.1:{cluster.master_for_slot(slot)}/0"  # the node killed: maps come from others
    topo = Topology(Settings(redis_url=seed, redis_cluster=True), retries=3)
    await topo.start()
    try:
        await rides_out_a_kill(cluster, topo, slot)
    finally:
        await topo.aclose()


async def rides_out_a_kill(cluster: LocalRedisCluster, topo: Topology[Redis], slot: int) -> None:
    await topo.call(slot, lambda c: c.set("{kill}:k", "v"))
    assert await topo.for_slot(slot).wait(1, 2000) == 1  # on its replica before the kill
    t0 = time.monotonic()
    killed = cluster.kill_master(slot, wait=False)
    assert await topo.call(slot, lambda c: c.get("{kill}:k"), deadline_s=15) == b"v"
    took = time.monotonic() - t0
    print(f"killed master {killed}: a call started at once succeeded after {took:.2f} s")
    assert took < 10
    new = cluster.master_for_slot(slot)
    assert new != killed and topo.address(slot) == addr(new)
    assert await topo.call(slot, lambda c: c.set("{kill}:k", "w"))

    t0 = time.monotonic()
    await asyncio.to_thread(cluster.restart_node, killed)
    print(f"restarted {killed} as a replica in {time.monotonic() - t0:.2f} s")
    assert cluster.replicas_of(new) == [killed]


async def test_single_redis_serves_every_slot() -> None:
    with RedisServer() as server:
        await single_redis(server)


async def single_redis(server: RedisServer) -> None:
    topo = Topology(Settings(redis_url=server.url), retries=2)
    try:
        await topo.start()
        assert not topo.is_cluster and partition_count(topo.settings) == 1
        client = topo.for_slot(0)
        assert all(topo.for_slot(s) is client for s in (1, 5000, 16383))
        assert topo.clients() == [client]
        assert await topo.call(123, lambda c: c.set("single:k", 1)) is True
        assert await topo.refresh() is False
    finally:
        await topo.aclose()
