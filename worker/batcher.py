"""Script calls made by many runs in the same event-loop turn go to Redis in one pipelined round trip.

With hundreds of runs in flight, redis-py's fixed cost per command (take a connection, check it,
write, read under a timeout, give it back) is most of a worker's CPU. Commits of different runs
share nothing, so they can share a round trip: each call still gets its own reply or error. A call
whose caller was cancelled before the batch left is dropped, as a single command would have been.
"""

from __future__ import annotations

import asyncio
from typing import Any

from redis.asyncio import Redis
from redis.commands.core import AsyncScript
from redis.exceptions import NoScriptError

__all__ = ["ScriptBatcher"]


_Call = tuple[AsyncScript, list[Any], list[Any], "asyncio.Future[Any]"]


class ScriptBatcher:
    def __init__(self, redis: Redis, max_batch: int = 512) -> None:
        self.redis = redis
        self.max_batch = max_batch
        self.pending: list[_Call] = []
        self.scheduled = False
        self.sending: set[asyncio.Task[None]] = set()
        self.batches = 0  # round trips sent (for the bench)
        self.calls = 0

    def call(self, script: AsyncScript, keys: list[Any], args: list[Any]) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()
        self.pending.append((script, keys, args, fut))
        if not self.scheduled:
            self.scheduled = True
            loop.call_soon(self._flush)
        return fut

    def _flush(self) -> None:
        self.scheduled = False
        while self.pending:
            batch, self.pending = self.pending[: self.max_batch], self.pending[self.max_batch :]
            task = asyncio.get_running_loop().create_task(self._send(batch))
            self.sending.add(task)
            task.add_done_callback(self.sending.discard)

    async def _send(self, batch: list[_Call], reloaded: bool = False) -> None:
        batch = [c for c in batch if not c[3].done()]  # its caller gave up before it left
        if not batch:
            return
        self.batches += 1
        self.calls += len(batch)
        if len(batch) == 1:
            script, keys, args, fut = batch[0]
            await _settle(fut, script(keys=keys, args=args))
            return
        try:
            async with self.redis.pipeline(transaction=False) as pipe:
                for script, keys, args, _ in batch:
                    pipe.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)
                replies = await pipe.execute(raise_on_error=False)
        except BaseException as exc:
            for *_, fut in batch:
                if not fut.done():
                    fut.set_exception(exc)
            if isinstance(exc, asyncio.CancelledError):
                raise
            return
        unknown: list[_Call] = []
        for call, reply in zip(batch, replies, strict=True):
            script, keys, args, fut = call
            if isinstance(reply, NoScriptError):  # Redis (re)started without its scripts
                unknown.append(call)
            elif fut.done():
                continue
            elif isinstance(reply, Exception):
                fut.set_exception(reply)
            else:
                fut.set_result(reply)
        if unknown and not reloaded:
            # Load each script once and send the calls again together (not one round trip and one
            # pooled connection per call: with a thousand runs starting, that was most of the CPU).
            try:
                for script in {id(c[0]): c[0] for c in unknown}.values():
                    await self.redis.script_load(script.script)
            except BaseException as exc:
                for *_, fut in unknown:
                    if not fut.done():
                        fut.set_exception(exc)
                if isinstance(exc, asyncio.CancelledError):
                    raise
                return
            await self._send(unknown, reloaded=True)
        else:
            for script, keys, args, fut in unknown:
                await _settle(fut, script(keys=keys, args=args))

    async def aclose(self) -> None:
        if self.sending:
            await asyncio.gather(*self.sending, return_exceptions=True)


async def _settle(fut: asyncio.Future[Any], call: Any) -> None:
    try:
        reply = await call
    except Exception as exc:
        if not fut.done():
            fut.set_exception(exc)
        return
    if not fut.done():
        fut.set_result(reply)
