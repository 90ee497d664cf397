"""Script calls made by many runs in the same event-loop turn go to Redis in one pipelined round trip
per node.

With hundreds of runs in flight, redis-py's fixed cost per command (take a connection, check it,
write, read under a timeout, give it back) is most of a worker's CPU. Commits of different runs
share nothing, so they can share a round trip: each call still gets its own reply or error. A call
whose caller was cancelled before the batch left is dropped, as a single command would have been.

A turn's calls leave in pipelines of ``max_batch`` (32), each on its own connection, not in one:
Redis runs the first while the worker packs the next, and the worker resumes the first 32 runs
while Redis runs the rest. One pipeline of 256 left both idle in turn: a run's first model call
started 90 ms after its job, now 50-60 ms (bench figure 4, 1,000 in flight: 0.78 → 0.80 of ideal).

On a cluster, a batch that meets a moved slot or a dead master is sent again, after the topology is
read anew, to the node that serves each call's partition now (every script here answers a repeat
of itself as the first time, so a batch whose reply was lost may be sent again). With
``wait_replicas``, each batch ends with ``WAIT``: its callers hear back once that many replicas
hold the writes, so a failover that follows loses none of what a run then acts upon.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from redis.commands.core import AsyncScript
from redis.exceptions import NoScriptError, ResponseError

from shared.keys import Partition
from shared.partitions import Partitions
from shared.topology import is_retryable

__all__ = ["ScriptBatcher", "pipelined"]

log = logging.getLogger("agentmill.worker")

_Call = tuple[Partition, AsyncScript, list[Any], list[Any], "asyncio.Future[Any]"]


class ScriptBatcher:
    def __init__(
        self,
        parts: Partitions[Any],
        max_batch: int = 32,
        *,
        wait_replicas: int = 0,
        wait_timeout_ms: int = 200,
        reroute_deadline_s: float = 30.0,
    ) -> None:
        self.parts = parts
        self.max_batch = max_batch
        self.wait_replicas = wait_replicas
        self.wait_timeout_ms = wait_timeout_ms
        self.reroute_deadline_s = reroute_deadline_s
        self.pending: list[_Call] = []
        self.scheduled = False
        self.sending: set[asyncio.Task[None]] = set()
        self.batches = 0  # round trips sent (for the bench)
        self.calls = 0

    def call(
        self, part: Partition, script: AsyncScript, keys: list[Any], args: list[Any]
    ) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()
        self.pending.append((part, script, keys, args, fut))
        if not self.scheduled:
            self.scheduled = True
            loop.call_soon(self._flush)
        return fut

    def _flush(self) -> None:
        self.scheduled = False
        pending, self.pending = self.pending, []
        self._dispatch(pending, time.monotonic() + self.reroute_deadline_s)

    def _dispatch(self, calls: list[_Call], deadline: float) -> None:
        """Group calls by the node that serves their partition now, one task per batch."""
        groups: dict[int, tuple[Any, list[_Call]]] = {}
        for c in calls:
            client = self.parts.client(c[0])
            groups.setdefault(id(client), (client, []))[1].append(c)
        loop = asyncio.get_running_loop()
        for client, group in groups.values():
            for i in range(0, len(group), self.max_batch):
                task = loop.create_task(self._send(client, group[i : i + self.max_batch], deadline))
                self.sending.add(task)
                task.add_done_callback(self.sending.discard)

    async def _send(self, client: Any, batch: list[_Call], deadline: float, reloaded: bool = False) -> None:
        batch = [c for c in batch if not c[4].done()]  # its caller gave up before it left
        if not batch:
            return
        self.batches += 1
        self.calls += len(batch)
        commands: list[tuple[Any, ...]] = [
            ("EVALSHA", script.sha, len(keys), *keys, *args) for _, script, keys, args, _ in batch
        ]
        if self.wait_replicas:
            commands.append(("WAIT", self.wait_replicas, self.wait_timeout_ms))
        try:
            replies = await pipelined(client, commands)
        except BaseException as exc:
            if is_retryable(exc) and await self._reroute(batch, deadline, exc):
                return
            _fail(batch, exc)
            if isinstance(exc, asyncio.CancelledError):
                raise
            return
        if self.wait_replicas:
            replies.pop()  # WAIT's count of replicas: best effort, a shortfall is not an error
        unknown: list[_Call] = []
        moved: list[_Call] = []
        first_moved: BaseException | None = None
        for call, reply in zip(batch, replies, strict=True):
            fut = call[4]
            if isinstance(reply, NoScriptError):  # Redis (re)started without its scripts
                unknown.append(call)
            elif isinstance(reply, Exception) and is_retryable(reply) and not fut.done():
                moved.append(call)
                first_moved = first_moved or reply
            elif fut.done():
                continue
            elif isinstance(reply, Exception):
                fut.set_exception(reply)
            else:
                fut.set_result(reply)
        if moved and not await self._reroute(moved, deadline, first_moved):
            _fail(moved, first_moved or RuntimeError("moved"))
        if not unknown:
            return
        if reloaded:
            _fail(unknown, NoScriptError("the script is still unknown after SCRIPT LOAD"))
            return
        # Load each script once and send the calls again together (not one round trip and one
        # pooled connection per call: with a thousand runs starting, that was most of the CPU).
        try:
            for script in {id(c[1]): c[1] for c in unknown}.values():
                await client.script_load(script.script)
        except BaseException as exc:
            if is_retryable(exc) and await self._reroute(unknown, deadline, exc):
                return
            _fail(unknown, exc)
            if isinstance(exc, asyncio.CancelledError):
                raise
            return
        await self._send(client, unknown, deadline, reloaded=True)

    async def _reroute(self, calls: list[_Call], deadline: float, exc: BaseException | None) -> bool:
        """On a cluster: read the topology anew and send the calls again to whoever serves their
        partitions now (False: a single Redis, whose client retried already, or past the deadline)."""
        if self.parts.single or time.monotonic() >= deadline:
            return False
        log.info("resending %d script calls after %s", len(calls), type(exc).__name__)
        await asyncio.sleep(0.05)
        try:
            await self.parts.topology.refresh()
        except Exception as refresh_exc:  # every node unreachable for now: try again after a pause
            log.warning("cluster topology refresh failed: %s", refresh_exc)
            await asyncio.sleep(0.2)
        self._dispatch(calls, deadline)
        return True

    async def aclose(self) -> None:
        while self.sending:
            await asyncio.gather(*list(self.sending), return_exceptions=True)


async def pipelined(client: Any, commands: list[tuple[Any, ...]]) -> list[Any]:
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


def _fail(calls: list[_Call], exc: BaseException) -> None:
    """Each call's caller, unless it gave up already, gets ``exc``."""
    for *_, fut in calls:
        if not fut.done():
            fut.set_exception(exc)
