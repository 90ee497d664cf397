"""Reaching the partitions (shared/partitions.py) from the producer: one script on one partition,
one script on several partitions, in one pipelined round trip per node (reads on several
partitions: ``Partitions.pipelined``). Every call follows a failover or a moved slot (``Partitions.call``)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from redis.asyncio import Redis
from redis.commands.core import AsyncScript
from redis.exceptions import NoScriptError

from shared import keys
from shared.partitions import Partitions, partition_count
from shared.settings import Settings
from shared.topology import is_retryable

__all__ = ["Parts", "as_partitions", "by_node", "run_many", "run_script"]

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


async def run_script(
    parts: Parts, script: AsyncScript, part: keys.Partition, k: list[Any], a: list[Any]
) -> Any:
    """``script`` on ``part``'s node (loaded there when the node does not know it)."""

    async def go(c: Redis) -> Any:
        return await script(keys=k, args=a, client=c)

    return await parts.call(part, go)


def by_node(parts: Parts, where: Sequence[keys.Partition]) -> list[list[int]]:
    """The indexes of ``where`` grouped by the node client that serves them now, in order."""
    groups: dict[int, list[int]] = {}
    for i, p in enumerate(where):
        groups.setdefault(id(parts.client(p)), []).append(i)
    return list(groups.values())


async def run_many(parts: Parts, script: AsyncScript, calls: Sequence[Call]) -> list[Any]:
    """``script`` once per call, one pipelined round trip per node (all nodes at once); the replies
    in order. A call answered NOSCRIPT or hit by a redirection is made again on its own (which loads
    the script or follows the slot); any other error is raised. One call: just that call."""
    if len(calls) == 1:
        return [await run_script(parts, script, *calls[0])]
    out: list[Any] = [None] * len(calls)

    async def node(idx: list[int]) -> None:
        client = parts.client(calls[idx[0]][0])
        replies: list[Any]
        try:
            async with client.pipeline(transaction=False) as pipe:
                for i in idx:
                    _, k, a = calls[i]
                    pipe.evalsha(script.sha, len(k), *k, *a)
                replies = await pipe.execute(raise_on_error=False)
        except Exception as exc:
            if not is_retryable(exc):
                raise
            replies = [exc] * len(idx)
        for i, r in zip(idx, replies, strict=True):
            if isinstance(r, Exception):
                if not (isinstance(r, NoScriptError) or is_retryable(r)):
                    raise r
                r = await run_script(parts, script, *calls[i])
            out[i] = r

    await asyncio.gather(*(node(idx) for idx in by_node(parts, [c[0] for c in calls])))
    return out
