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

Each batch goes the one route to Redis (``Partitions.sending``, shared/route.py): grouped by node,
sent again after a moved slot, a dead master or a missing script (NOSCRIPT, "Function not found") (every script here answers a repeat of
itself as the first time, so a batch whose reply was lost may be sent again). With
``wait_replicas``, each batch ends with ``WAIT``: its callers hear back once that many replicas
hold the writes, so a failover that follows loses none of what a run then acts upon.
"""

from __future__ import annotations

import asyncio
from typing import Any

from shared.functions import Script
from shared.keys import Partition
from shared.partitions import Partitions

__all__ = ["ScriptBatcher"]

_Call = tuple[Partition, Script, list[Any], list[Any], "asyncio.Future[Any]"]

# A call after this long with none (``ScriptBatcher.run``) goes at once: the batcher is quiet, no
# other run is stepping beside it. Calls closer together than this wait for the turn's batch.
QUIET_S = 0.002


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
        self.alone = 0  # calls being sent by their callers (``run``)
        self.last_out = float("-inf")  # the loop's time when the last call or batch went out
        self.batches = 0  # round trips sent (for the bench)
        self.calls = 0

    async def run(self, part: Partition, script: Script, keys: list[Any], args: list[Any]) -> Any:
        """The call's reply. A call that finds the batcher quiet (nothing in flight or waiting, and
        nothing sent for ``QUIET_S``: a paced run's commit) is sent at once, by its caller, with no
        turn of the loop before it leaves; the others, and those made while it is out, wait for
        the turn's batch, as every call did (``call``): runs stepping side by side share round trips."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        last, self.last_out = self.last_out, now
        if self.pending or self.sending or self.alone or now - last < QUIET_S:
            return await self.call(part, script, keys, args)
        fut: asyncio.Future[Any] = loop.create_future()
        self.alone += 1
        try:
            await self._send([(part, script, keys, args, fut)], self.reroute_deadline_s)
        except BaseException:  # cancelled: the reply (or the cancel) set on the future is not needed
            if fut.done() and not fut.cancelled():
                fut.exception()
            raise
        finally:
            self.alone -= 1
        return await fut

    def call(self, part: Partition, script: Script, keys: list[Any], args: list[Any]) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()
        self.pending.append((part, script, keys, args, fut))
        if not self.scheduled:  # the turn's first call: its batch leaves in the next turn
            self.scheduled = True
            self._track(loop.create_task(self._turn()))
        return fut

    async def _turn(self) -> None:
        """The calls made since the last batch left: the first ``max_batch`` sent by this task
        itself (one turn after the first call, as a callback scheduling the batch's task took two),
        the others by tasks of their own, side by side."""
        self.scheduled = False
        pending, self.pending = self.pending, []
        self._dispatch(pending[self.max_batch :], self.reroute_deadline_s)
        await self._send(pending[: self.max_batch], self.reroute_deadline_s)

    def _track(self, task: asyncio.Task[None]) -> None:
        self.sending.add(task)
        task.add_done_callback(self.sending.discard)

    def _dispatch(self, calls: list[_Call], deadline_s: float) -> None:
        """One task per ``max_batch`` calls, each sent by ``Partitions.sending`` (one round trip per
        node it spans; on a single Redis, one)."""
        loop = asyncio.get_running_loop()
        for i in range(0, len(calls), self.max_batch):
            self._track(loop.create_task(self._send(calls[i : i + self.max_batch], deadline_s)))

    async def _send(self, batch: list[_Call], deadline_s: float) -> None:
        batch = [c for c in batch if not c[4].done()]  # its caller gave up before it left
        if not batch:
            return
        out = self.parts.sending(
            deadline_s=deadline_s, wait_replicas=self.wait_replicas, wait_timeout_ms=self.wait_timeout_ms
        )
        try:  # a call that cannot be framed fails its callers too, rather than leave them waiting
            out.add_all([(part, script.command(keys, args), script) for part, script, keys, args, _ in batch])
            replies = await out.replies()
        except BaseException as exc:
            _fail(batch, exc)
            if isinstance(exc, asyncio.CancelledError):
                raise
            return
        finally:
            self.batches += out.round_trips
            self.calls += out.commands_sent
        for (*_, fut), reply in zip(batch, replies, strict=True):
            if fut.done():
                continue
            if isinstance(reply, BaseException):
                fut.set_exception(reply)
            else:
                fut.set_result(reply)

    async def aclose(self) -> None:
        while self.sending:
            await asyncio.gather(*list(self.sending), return_exceptions=True)


def _fail(calls: list[_Call], exc: BaseException) -> None:
    """Each call's caller, unless it gave up already, gets ``exc``."""
    for *_, fut in calls:
        if not fut.done():
            fut.set_exception(exc)
