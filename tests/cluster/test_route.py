"""The one route to the partitions' Redis on a 3-master cluster (shared/route.py): commands for every
partition in one round trip per node, each with its own reply; after a failover the route's stale
map meets MOVED and sends again to the promoted master; a node that forgot a script gets it again."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Iterator
from typing import Any

import pytest
from redis.exceptions import MovedError

from shared import keys
from shared.functions import EvalScript, FunctionScript, Library, Script
from shared.partitions import Partitions
from shared.scripts import Scripts
from shared.settings import Settings
from tests.support.redis_cluster import LocalRedisCluster

# One process runs the module (--dist loadgroup): its cluster (and what it builds on it) is
# module-scoped, and spread over the test processes each built all of it again.
pytestmark = [
    pytest.mark.integration,
    pytest.mark.xdist_group("cluster_route"),
    pytest.mark.timeout(90),
    pytest.mark.skipif(shutil.which("redis-cli") is None, reason="redis-cli is needed to create a cluster"),
]

ECHO = "redis.call('INCR', KEYS[1]); return ARGV[1]"


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalRedisCluster]:
    with LocalRedisCluster(masters=3, replicas_per_master=1) as c:
        yield c


def _echo(client: Any, kind: str) -> Script:
    """ECHO run by EVALSHA, or as a function of a library (which replicates: a promoted replica has it)."""
    if kind == "evalsha":
        return EvalScript(client, ECHO)
    lib = Library(
        "e1", f"#!lua name=agentmill_e1\nredis.register_function('echo_e1', function(KEYS, ARGV) {ECHO} end)"
    )
    return FunctionScript(client, lib, "echo")


@pytest.mark.parametrize("kind", ["evalsha", "fcall"])
async def test_one_round_trip_per_node_and_a_failover_followed(cluster: LocalRedisCluster, kind: str) -> None:
    parts: Partitions[Any] = Partitions.from_settings(Settings(redis_url=cluster.url, redis_cluster=True))
    await parts.start()
    try:
        script = _echo(parts.client(parts.parts[0]), kind)
        nodes = {id(parts.client(p)) for p in parts.parts}
        assert len(parts.parts) == 16 and len(nodes) == 3

        out = parts.sending()
        for p in parts.parts:
            out.add(p, ("SET", p.run("r"), str(p.index)))
            out.add_script(p, script, [p.run(kind)], [f"p{p.index}"])
        replies = await out.replies()
        assert replies[0::2] == [b"OK"] * 16
        # Every node met the script first as NOSCRIPT (or "Function not found"): loaded there, and only
        # those calls sent again.
        assert replies[1::2] == [f"p{i}".encode() for i in range(16)]
        assert out.round_trips == 3 + 3 and out.commands_sent == 32 + 16

        # A failover the route has not heard of: its map still names the old master, now a replica.
        part = parts.parts[5]
        await asyncio.to_thread(cluster.failover, part.slot)
        out = parts.sending(deadline_s=20.0)
        at = [out.add_script(p, script, [p.run(kind)], ["again"]) for p in parts.parts]
        replies = await out.replies()
        assert [replies[i] for i in at] == [b"again"] * 16
        counts = await asyncio.gather(
            *(parts.call(p, lambda c, p=p: c.get(p.run(kind))) for p in parts.parts)
        )
        assert counts == [b"2"] * 16  # each partition's script ran twice in all: none lost, none doubled
    finally:
        await parts.aclose()


@pytest.mark.parametrize("functions", [True, False])
async def test_a_script_with_no_key_of_its_own_is_moved_off_a_node_without_its_slot(
    cluster: LocalRedisCluster, functions: bool
) -> None:
    """A script with no key of its own still declares keys of its partition (the fixed keys
    ``Scripts.frame`` adds), so a master that does not own the slot (a route whose map is stale after
    resharding) answers MOVED, which the route follows, instead of running the script until its first
    key fails ("Script attempted to access a non local key"). A frame without them, tried to
    save a call its seven strings, fails here."""
    parts: Partitions[Any] = Partitions.from_settings(Settings(redis_url=cluster.url, redis_cluster=True))
    await parts.start()
    try:
        part = parts.parts[0]
        stranger = next(parts.client(p) for p in parts.parts if parts.client(p) is not parts.client(part))
        scripts = Scripts(stranger, functions=functions)
        k, a = scripts.frame(part, [], [])
        assert all(keys.slot_of(key) == part.slot for key in k)
        with pytest.raises(MovedError) as moved:
            await scripts.scaling(keys=k, args=a)
        assert moved.value.slot_id == part.slot
        here = Scripts(parts.client(part), functions=functions)
        reply = await here.scaling(*here.frame(part, [], []))
        assert [int(x) for x in reply[:4]] == [0, 0, 0, 0]  # the owner runs it: nothing queued yet
    finally:
        await parts.aclose()
