"""Reaching the partitions (shared/partitions.py) from the producer: one script on one partition
(``Partitions.call``), one script on several partitions in one round trip per node
(``Partitions.sending``; reads on several partitions: ``Partitions.pipelined``). Every call follows a
failover or a moved slot."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from redis.asyncio import Redis

from shared import keys
from shared.functions import Script
from shared.partitions import Partitions, partition_count
from shared.settings import Settings

__all__ = ["Parts", "as_partitions", "run_many", "run_script"]

Parts = Partitions[Redis]
# One script call already framed (Scripts.frame, or plain for a script off the partitions): where it
# runs, its KEYS and its ARGV.
Call = tuple[keys.Partition, list[Any], list[Any]]


def as_partitions(redis: Redis | Parts, settings: Settings) -> Parts:
    """A Partitions as is; a plain client as the settings' partitions all on that one client (the
    caller's, who closes it)."""
    if isinstance(redis, Partitions):
        return redis
    return Partitions.of_client(redis, partition_count(settings))


async def run_script(parts: Parts, script: Script, part: keys.Partition, k: list[Any], a: list[Any]) -> Any:
    """``script`` on ``part``'s node (loaded there when the node does not know it)."""

    async def go(c: Redis) -> Any:
        return await script(keys=k, args=a, client=c)

    return await parts.call(part, go)


async def run_many(parts: Parts, script: Script, calls: Sequence[Call]) -> list[Any]:
    """``script`` once per call, one round trip per node (all nodes at once, ``Partitions.sending``:
    a call answered NOSCRIPT, "Function not found" or hit by a redirection is sent again); the replies in order, any
    error reply raised. One call: just that call."""
    if len(calls) == 1:
        return [await run_script(parts, script, *calls[0])]
    out = parts.sending()
    for part, k, a in calls:
        out.add_script(part, script, k, a)
    replies = await out.replies()
    for r in replies:
        if isinstance(r, Exception):
            raise r
    return replies
