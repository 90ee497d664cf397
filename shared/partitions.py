"""The partitions of the key space (keys.Layout) on the Redis nodes that serve them (topology).

On a single Redis every partition's client is the one client; on a cluster, the client of the
master that owns the partition's slot now, re-bound when a call meets MOVED or a dead master.
``Partitions`` is the only way to a partition's Redis: ``call`` (one function on one partition),
``pipelined``/``each`` (reads and writes with redis-py's reply parsing, one round trip per node)
and ``sending`` (raw commands and scripts for many partitions, shared.route).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, Generic, TypeVar

from redis.asyncio import Redis

from shared import keys
from shared.replies import text
from shared.route import Sending
from shared.settings import Settings
from shared.topology import Topology

__all__ = ["FixedTopology", "Partitions", "partition_count"]

R = TypeVar("R", bound=Redis)
T = TypeVar("T")


def partition_count(settings: Settings) -> int:
    """AGENTMILL_PARTITIONS, else 16 on a cluster and 1 on a single Redis."""
    if settings.partitions is not None:
        return settings.partitions
    return 16 if settings.redis_cluster else 1


class Partitions(Generic[R]):
    def __init__(self, layout: keys.Layout, topology: Topology[R]) -> None:
        self.layout = layout
        self.topology = topology
        self.parts = layout.parts

    @classmethod
    def of_client(cls, client: R, count: int = 1) -> Partitions[R]:
        """``count`` partitions on one client the caller owns (and closes)."""
        return cls(keys.Layout(count), FixedTopology(client))  # type: ignore[arg-type]

    @classmethod
    def from_settings(cls, settings: Settings, **client_options: Any) -> Partitions[R]:
        """Not connected yet: ``await start()`` discovers a cluster's nodes."""
        topo: Topology[R] = Topology(settings, **client_options)
        return cls(keys.Layout(partition_count(settings)), topo)

    async def start(self) -> None:
        await self.topology.start()

    async def aclose(self) -> None:
        await self.topology.aclose()

    @property
    def single(self) -> bool:
        """Every partition on one client (no cluster)."""
        return not self.topology.is_cluster

    def client(self, part: keys.Partition) -> R:
        return self.topology.for_slot(part.slot)

    def home(self, some_id: str) -> keys.Partition:
        return self.layout.home(some_id)

    async def refresh(self) -> None:
        """Read the topology anew (a cluster's slot map; nothing on a single Redis)."""
        await self.topology.refresh()

    def sending(
        self,
        *,
        deadline_s: float = 30.0,
        wait_replicas: int = 0,
        wait_timeout_ms: int = 200,
        loaded: set[tuple[int, str]] | None = None,
    ) -> Sending:
        """Commands for many partitions in one round trip per node, each with its own reply, sent
        again after a failover, a moved slot or NOSCRIPT (``shared.route``)."""
        return Sending(
            self,
            deadline_s=deadline_s,
            wait_replicas=wait_replicas,
            wait_timeout_ms=wait_timeout_ms,
            loaded=loaded,
        )

    async def call(
        self, part: keys.Partition, fn: Callable[[R], Awaitable[T]], *, deadline_s: float = 30.0
    ) -> T:
        """``fn(client)`` on the partition's node, following a failover or a moved slot."""
        return await self.topology.call(part.slot, fn, deadline_s=deadline_s)

    async def call_key(self, key: str, fn: Callable[[R], Awaitable[T]], *, deadline_s: float = 30.0) -> T:
        """``fn(client)`` on the node serving ``key``'s slot (a key outside the partitions: a
        provider's limits), following a failover or a moved slot."""
        return await self.topology.call(keys.slot_of(key), fn, deadline_s=deadline_s)

    async def each(
        self,
        fn: Callable[[Any, keys.Partition], None],
        parts: Iterable[keys.Partition] | None = None,
        *,
        deadline_s: float = 30.0,
    ) -> list[Any]:
        """Queue ``fn(pipe, part)`` for every partition (or those given), one pipelined round trip
        per node (all in parallel); the replies in partition order, each a list of that partition's
        command replies."""
        chosen = list(self.parts if parts is None else parts)
        return await self.pipelined(
            [(p, functools.partial(_apply_to, fn, p)) for p in chosen], deadline_s=deadline_s
        )

    async def pipelined(
        self,
        ops: Sequence[tuple[keys.Partition, Callable[[Any], None]]],
        *,
        deadline_s: float = 30.0,
        skip_failed: bool = False,
    ) -> list[list[Any]]:
        """Each op queues commands on a pipeline to its partition's node; one pipelined round trip
        per node (all nodes at once), following a failover for up to ``deadline_s``. The replies of
        each op, in order; with ``skip_failed``, a node that stays unreachable gives its ops no
        replies (``[]``) instead of failing them all."""
        out: list[list[Any]] = [[] for _ in ops]
        groups: dict[int, tuple[keys.Partition, list[int]]] = {}
        for i, (part, _) in enumerate(ops):
            groups.setdefault(id(self.client(part)), (part, []))[1].append(i)

        async def node(first: keys.Partition, idx: list[int]) -> None:
            async def send(c: R) -> list[list[Any]]:
                counts = []
                async with c.pipeline(transaction=False) as pipe:
                    for i in idx:
                        before = len(pipe.command_stack)
                        ops[i][1](pipe)
                        counts.append(len(pipe.command_stack) - before)
                    replies = await pipe.execute()
                res, at = [], 0
                for n in counts:
                    res.append(replies[at : at + n])
                    at += n
                return res

            try:
                replies = await self.call(first, send, deadline_s=deadline_s)
            except Exception:
                if not skip_failed:
                    raise
                return
            for i, r in zip(idx, replies, strict=True):
                out[i] = r

        await asyncio.gather(*(node(first, idx) for first, idx in groups.values()))
        return out

    async def locate(self, run_id: str) -> keys.Partition | None:
        """The partition a run lives in: its home, or where its home's pointer says (a run of a
        session that lives elsewhere); None when there is no such run. No round trip with one
        partition."""
        if self.layout.count == 1:
            return self.parts[0]
        home = self.layout.home(run_id)

        async def look(c: R) -> list[Any]:
            async with c.pipeline(transaction=False) as pipe:
                pipe.exists(home.run(run_id))
                pipe.get(home.pointer(run_id))
                return list(await pipe.execute())

        exists, pointer = await self.call(home, look)
        if exists:
            return home
        if pointer is not None:
            return self.parts[int(text(pointer))]
        return None


def _apply_to(fn: Callable[[Any, keys.Partition], None], part: keys.Partition, pipe: Any) -> None:
    fn(pipe, part)


class FixedTopology(Generic[R]):
    """One client the caller owns serving every slot (a single Redis handed in, as tests do)."""

    is_cluster = False

    def __init__(self, client: R) -> None:
        self.client = client

    async def start(self) -> None:
        return None

    def for_slot(self, slot: int) -> R:
        return self.client

    def clients(self) -> list[R]:
        return [self.client]

    async def refresh(self) -> bool:
        return False

    async def call(self, slot: int, fn: Callable[[R], Awaitable[T]], *, deadline_s: float = 30.0) -> T:
        return await fn(self.client)

    async def aclose(self) -> None:
        return None  # the caller closes its client
