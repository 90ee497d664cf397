"""The one route for commands bound for several partitions: grouped by the node that serves each
partition now, one round trip per node (all nodes at once), each command with its own reply.

A command that meets a moved slot or a dead master is sent again, after the topology is read anew,
to whoever serves its partition then, until the deadline; one refused for an unknown script
(NOSCRIPT, or "Function not found" for the function library: the node restarted without
persistence, or is new) is sent again after the script (or library) is loaded on that node. On a single Redis a dropped connection is retried under the client's retry policy
(``pipelined``) and a redirection cannot happen. Every script sent this way answers a repeat of
itself as the first time, which is what makes sending again safe.

Who goes this way: the worker's script batcher (the runs' commits of one loop turn), arq's job
bookkeeping (``worker.process.finisher``), the producer's batch chunks (``producer.chunk_sender``, which
writes each chunk as it is ready: ``Sending.flush``) and its scripts on several partitions
(``shared.script_sending.run_many``). One function on one partition goes through ``Partitions.call``;
reads with redis-py's reply parsing through ``Partitions.pipelined``. Both follow the same topology.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from shared.functions import Script, missing
from shared.keys import Partition
from shared.topology import is_retryable

__all__ = ["Command", "Nodes", "Sending", "pipelined"]

Command = tuple[Any, ...]
_DOWN = (RedisConnectionError, RedisTimeoutError, OSError)


class Nodes(Protocol):
    """What the route needs of ``Partitions``: the client serving a partition now, whether there is
    only one, and a way to read the topology anew."""

    @property
    def single(self) -> bool: ...

    def client(self, part: Partition) -> Any: ...

    async def refresh(self) -> None: ...


class Sending:
    """Commands added for their partitions, sent in one round trip per node by ``replies()``.
    ``flush()`` writes what was added so far without waiting for replies (a producer that prepares
    its next chunk while Redis runs the last). ``loaded``: (node, script ``load_key``) pairs known
    to be loaded, shared by the caller across sendings: a script not known on a node is loaded before
    its first command is written there (otherwise NOSCRIPT costs a second round trip).
    ``wait_replicas``: each node's round trip ends with WAIT (best effort, its count dropped)."""

    def __init__(
        self,
        nodes: Nodes,
        *,
        deadline_s: float = 30.0,
        wait_replicas: int = 0,
        wait_timeout_ms: int = 200,
        loaded: set[tuple[int, str]] | None = None,
    ) -> None:
        self.nodes = nodes
        self.deadline = time.monotonic() + deadline_s
        self.wait = ("WAIT", wait_replicas, wait_timeout_ms) if wait_replicas else None
        self.loaded = loaded
        self.items: list[tuple[Partition, Command, Script | None]] = []
        self._clients: dict[int, Any] = {}
        self._queued: dict[int, list[int]] = {}  # node -> items added, not written yet
        self._written: dict[int, list[int]] = {}  # node -> items written on its held connection
        self._conns: dict[int, Any] = {}  # node -> a connection held from its pool
        self._resend: list[int] = []  # items whose node failed before their reply was read
        self.round_trips = 0  # for the bench and tests
        self.commands_sent = 0

    def add(self, part: Partition, command: Command, script: Script | None = None) -> int:
        """Queue ``command`` (with the script it runs, if any: loaded where it is missing); its index."""
        i = len(self.items)
        self.add_all([(part, command, script)])
        return i

    def add_script(self, part: Partition, script: Script, keys: Sequence[Any], args: Sequence[Any]) -> int:
        return self.add(part, script.command(keys, args), script)

    def add_all(self, items: Sequence[tuple[Partition, Command, Script | None]]) -> None:
        """Queue many commands at once (the worker's turn of commits: one grouping, not one per call)."""
        if not items:
            return
        base = len(self.items)
        self.items.extend(items)
        if self.nodes.single:  # one node: no grouping
            client = self.nodes.client(items[0][0])
            self._clients[id(client)] = client
            self._queued.setdefault(id(client), []).extend(range(base, base + len(items)))
            return
        for i, (part, _, _) in enumerate(items, base):
            client = self.nodes.client(part)
            self._clients[id(client)] = client
            self._queued.setdefault(id(client), []).append(i)

    async def flush(self) -> None:
        """Write what was added on a connection per node, replies left to ``replies()``."""
        for node, idx in self._queued.items():
            if not idx:
                continue
            self._queued[node] = []
            try:
                conn = self._conns.get(node)
                if conn is None:
                    client = self._clients[node]
                    await self._preload(client, idx)
                    conn = self._conns[node] = await client.connection_pool.get_connection()
                await conn.send_packed_command(conn.pack_commands([self.items[i][1] for i in idx]))
                self._written.setdefault(node, []).extend(idx)
                self.commands_sent += len(idx)
            except _DOWN:
                await self._drop(node)
                self._resend += idx
            except BaseException:
                await self._drop(node)  # cancelled mid-write: the connection cannot go back as is
                raise

    async def aclose(self) -> None:
        """Give up: connections with replies unread are dropped, not returned to their pools."""
        for node in list(self._conns):
            await self._drop(node)
        self._written.clear()

    async def __aenter__(self) -> Sending:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def replies(self) -> list[Any]:
        """Every command's reply (an error reply is its own reply; a redirection, a missing script or a node
        that stays unreachable until the deadline gives the last error). The connections go back."""
        queued = [(node, idx) for node, idx in self._queued.items() if idx]
        if (
            not self._written
            and not self._resend
            and len(queued) == 1
            and len(queued[0][1]) == len(self.items)
        ):
            out = await self._round_trip(
                self._clients[queued[0][0]], queued[0][1], None
            )  # one node, in order
        else:
            out = await self._each_node()
        self._queued.clear()
        again = self._resend + [
            i for i, r in enumerate(out) if isinstance(r, BaseException) and _resendable(r)
        ]
        if again:
            await self._again(sorted(again), out)
        return out

    async def _each_node(self) -> list[Any]:
        out: list[Any] = [None] * len(self.items)
        if self._written:  # a connection is held per node written to: the rest goes the same way
            await self.flush()
        work = [
            *(self._read(node, idx, out) for node, idx in self._written.items()),
            *(self._round_trip(self._clients[node], idx, out) for node, idx in self._queued.items() if idx),
        ]
        try:
            if len(work) == 1:
                await work[0]  # one node: no task to make
            else:
                await asyncio.gather(*work)
        except BaseException:
            await self.aclose()  # cancelled: a connection may hold replies unread
            raise
        await self._release()
        return out

    async def _read(self, node: int, idx: list[int], out: list[Any]) -> None:
        conn = self._conns[node]
        n = 0
        try:
            if self.wait:
                await conn.send_packed_command(conn.pack_commands([self.wait]))
            self.round_trips += 1
            for i in idx:
                try:
                    out[i] = await conn.read_response(disconnect_on_error=True)
                except ResponseError as exc:
                    out[i] = exc
                n += 1
            if self.wait:
                with contextlib.suppress(ResponseError):  # WAIT's count: best effort
                    await conn.read_response(disconnect_on_error=True)
        except _DOWN:
            await self._drop(node)
            self._resend += idx[n:]
        except BaseException:
            await self._drop(node)  # cancelled mid-read: no reply may stay unread on a pooled one
            raise

    async def _round_trip(self, client: Any, idx: list[int], out: list[Any] | None) -> list[Any]:
        """``idx`` in one round trip to ``client`` (its replies put in ``out``, or, with ``out``
        None, the replies in order: ``idx`` is then every item)."""
        items = self.items
        commands = [items[i][1] for i in idx]
        self.round_trips += 1
        self.commands_sent += len(idx)
        try:
            if self.loaded is not None:
                await self._preload(client, idx)
            replies = await pipelined(client, [*commands, self.wait] if self.wait else commands)
        except _DOWN as exc:
            replies = [exc] * len(idx)
        if self.wait and len(replies) > len(idx):
            replies.pop()  # WAIT's count of replicas: best effort
        if out is None:
            return replies
        for i, r in zip(idx, replies, strict=True):
            out[i] = r
        return out

    async def _again(self, idx: list[int], out: list[Any]) -> None:
        """Send ``idx`` again: a missing script after loading it on that node (once), a redirection
        or a dead node after reading the topology anew (clusters only, until the deadline)."""
        tried_load: set[tuple[int, str]] = set()
        while idx:
            if any(not _missing(out[i]) for i in idx):
                if self.nodes.single:
                    idx = [i for i in idx if _missing(out[i]) or out[i] is None]
                    if not idx:
                        return
                elif time.monotonic() >= self.deadline:
                    return
                else:
                    await asyncio.sleep(0.05)
                    try:
                        await self.nodes.refresh()
                    except Exception:  # every node unreachable for now: try again after a pause
                        await asyncio.sleep(0.2)
            groups: dict[int, list[int]] = {}
            loading: set[tuple[int, str]] = set()  # loaded in this pass
            for i in idx:
                client = self.nodes.client(self.items[i][0])
                self._clients[id(client)] = client
                if _missing(out[i]):
                    script = self.items[i][2]
                    key = (id(client), script.load_key if script else "")
                    if script is None or key in tried_load:
                        continue  # still unknown after loading it: its error is its reply
                    if key not in loading:
                        loading.add(key)
                        try:
                            await script.load(client)
                        except Exception as exc:
                            out[i] = exc
                            if not _resendable(exc):
                                continue
                groups.setdefault(id(client), []).append(i)
            tried_load |= loading
            for i in (i for g in groups.values() for i in g):
                out[i] = None
            await asyncio.gather(*(self._round_trip(self._clients[n], g, out) for n, g in groups.items()))
            idx = [i for g in groups.values() for i in g if _resendable(out[i])]

    async def _preload(self, client: Any, idx: Iterable[int]) -> None:
        if self.loaded is None:
            return
        for i in idx:
            script = self.items[i][2]
            if script is not None and (id(client), script.load_key) not in self.loaded:
                await script.load(client)
                self.loaded.add((id(client), script.load_key))

    async def _drop(self, node: int) -> None:
        conn = self._conns.pop(node, None)
        if conn is not None:
            await conn.disconnect()
            await self._clients[node].connection_pool.release(conn)

    async def _release(self) -> None:
        for node in list(self._conns):
            conn = self._conns.pop(node)
            await self._clients[node].connection_pool.release(conn)
        self._written.clear()


def _missing(reply: Any) -> bool:
    return isinstance(reply, BaseException) and missing(reply)


def _resendable(reply: Any) -> bool:
    return isinstance(reply, BaseException) and (missing(reply) or is_retryable(reply))


async def pipelined(client: Any, commands: list[Command]) -> list[Any]:
    """``commands`` in one round trip on one of ``client``'s pooled connections, their raw replies
    (no response callbacks: an OK is b"OK", a hash a flat list): what redis-py's
    ``Pipeline.execute(raise_on_error=False)`` does, without its bookkeeping per command (a stack of
    (args, options), a reply callback lookup, a reset), a fifth of a busy worker's Redis client CPU.
    The same contract: a command's error reply is its own reply; a connection error or timeout is
    retried whole under the client's retry policy, the connection dropped first; a cancel drops the
    connection (redis-py's send and read do that), so no reply is left unread on a pooled one."""
    pool = client.connection_pool
    conn = await pool.get_connection()

    async def once() -> list[Any]:
        await conn.send_packed_command(conn.pack_commands(commands))
        replies: list[Any] = []
        for _ in commands:
            try:
                replies.append(await conn.read_response())
            except ResponseError as exc:
                replies.append(exc)
        return replies

    async def dropped(error: Exception) -> None:
        await conn.disconnect()
        if conn.retry_on_error is None or not isinstance(error, tuple(conn.retry_on_error)):
            raise error

    try:
        return await conn.retry.call_with_retry(once, dropped)  # type: ignore[no-any-return]
    finally:
        await pool.release(conn)
