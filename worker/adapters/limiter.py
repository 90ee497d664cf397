"""Pool-wide provider limits: maxConcurrent, requestsPerMinute and tokensPerMinute of a profile's
provider, and the pause a 429's Retry-After asks for, shared by every worker through Redis.

Each model call to a limited endpoint first takes capacity with one Lua script
(shared/scripts.py CAPACITY_ACQUIRE). Concurrency slots are a sorted set of holders scored by
expiry: the holder renews its slot while the call runs, so the slot of a worker that died frees
itself after ``lease_ms``. Rates are sliding windows of start times (and token counts). A call
that must wait polls with growing, jittered sleeps; it holds nothing but its asyncio task, so an
abort cancels it at once. Keys: shared/keys.py, per endpoint (a hash of baseUrl).

Round trips per call: one to acquire (also with no limit declared: the 429 pause check), one to
release, one per renewal (every lease/3) while a slot is held, and one per poll while waiting.

Waiters for a concurrency slot or a request in the window stand in a line (a sorted set per
endpoint) ordered by their run's priority with the queue's aging rule, from when each began
waiting: a waiter is granted only while fewer waiters stand before it than there is room, so a
priority-8 run's call passes the priority-2 calls waiting before it (up to (8 - 2) aging quanta).
The head of the line (as many as the endpoint's limit) polls at the shortest interval, the others
back off. A
waiter that stops asking (its worker died) leaves the line after ``stale_ms``; one that gives up
(its run aborted) leaves at once. The tokens-per-minute window serves its waiters as they poll.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from shared import endpoint_keys
from shared.calls.base import ScriptCall
from shared.calls.limits import (
    CapacityAcquire,
    CapacityPause,
    CapacityRelease,
    CapacityRenew,
    CapacityVerdict,
)
from shared.functions import Script
from shared.provider_config import ProviderConfig
from shared.scripts import Scripts

__all__ = ["WINDOW_MS", "Grant", "Held", "OnKey", "OnWait", "ProviderLimiter", "limited"]

DEFAULT_AGING_MS = 30_000  # as AGENTMILL_PRIORITY_AGING_MS's default


WINDOW_MS = 60_000
OnWait = Callable[[str, int], Awaitable[None]]  # (reason, wait hint ms), called once per wait
OnKey = Callable[[str, Callable[[Any], Awaitable[Any]]], Awaitable[Any]]  # (key, fn(client)) -> fn's answer


@dataclass(frozen=True, slots=True)
class Grant:
    endpoint: str
    holder: str
    tokens: int
    slot: bool  # holds a concurrency slot (to renew and free)


def limited(cfg: ProviderConfig) -> bool:
    """Calls to this provider go through the limiter (a 429 pause applies to every HTTP endpoint)."""
    return cfg.kind in ("openai", "anthropic") and bool(cfg.base_url)


class ProviderLimiter:
    def __init__(
        self,
        scripts: Scripts,
        *,
        lease_ms: int = 15_000,
        window_ms: int = WINDOW_MS,
        poll_min_ms: int = 20,
        poll_max_ms: int = 500,
        on_key: OnKey | None = None,
        aging_ms: int = DEFAULT_AGING_MS,
    ) -> None:
        self.scripts = scripts
        # Runs a function with the client of the node serving a key's slot, following a failover
        # (Partitions.call_key; an endpoint's keys share one slot); None: the client the scripts
        # were registered on.
        self.on_key = on_key
        self.lease_ms = lease_ms
        self.window_ms = window_ms
        self.poll_min_ms = poll_min_ms
        self.poll_max_ms = poll_max_ms
        self.aging_ms = aging_ms
        self.stale_ms = 3 * poll_max_ms + 1_000  # a waiter asks at least every poll_max_ms

    async def try_acquire(
        self, cfg: ProviderConfig, holder: str, tokens: int, priority: int | None = None
    ) -> tuple[int, str]:
        """One attempt: (0, "ok") when granted, else (wait hint ms, reason). ``priority``: the
        run's, to stand in the endpoint's line (None: served as it polls)."""
        wait, reason, _ = await self._attempt(cfg, holder, tokens, priority)
        return wait, reason

    async def _attempt(
        self, cfg: ProviderConfig, holder: str, tokens: int, priority: int | None
    ) -> tuple[int, str, int]:
        """One attempt: (wait hint ms, reason, rank in the line (-1: none)); (0, "ok", -1) when granted."""
        call = CapacityAcquire(
            endpoint_keys.endpoint_hash(cfg.base_url or ""), holder, self.lease_ms, cfg.max_concurrent or 0,
            cfg.requests_per_minute or 0, cfg.tokens_per_minute or 0, max(0, tokens), self.window_ms, priority,
            self.aging_ms, self.stale_ms,
        )  # fmt: skip
        reply = await self._run(self.scripts.capacity_acquire, call)
        return int(reply[0]), call.verdict(reply).value, int(reply[2]) if len(reply) > 2 else -1

    async def acquire(
        self, cfg: ProviderConfig, tokens: int, on_wait: OnWait | None = None, priority: int | None = None
    ) -> Grant:
        """Wait until the endpoint has capacity for one call of about ``tokens`` tokens, in the
        endpoint's line at ``priority`` (the run's; None: served as it polls). A waiter that gives up
        (cancelled: its run aborted) leaves the line."""
        endpoint = endpoint_keys.endpoint_hash(cfg.base_url or "")
        holder = uuid.uuid4().hex
        told = False
        poll = self.poll_min_ms
        try:
            while True:
                wait, reason, rank = await self._attempt(cfg, holder, tokens, priority)
                if wait == 0:
                    return Grant(endpoint, holder, tokens, slot=cfg.max_concurrent is not None)
                if not told and on_wait is not None:
                    told = True
                    await on_wait(reason, wait)
                if reason == CapacityVerdict.CONCURRENCY and 0 <= rank < (cfg.max_concurrent or 0):
                    delay: float = self.poll_min_ms  # at the head of the line: the next free slots are theirs
                elif reason == CapacityVerdict.CONCURRENCY or (
                    reason == CapacityVerdict.REQUESTS and wait <= 1
                ):
                    # A freed slot is noticed by polling: short at first, growing, jittered to spread waiters.
                    delay = poll * random.uniform(0.5, 1.0)
                    poll = min(self.poll_max_ms, poll * 2)
                else:  # a window or a pause ends at a known time
                    delay = min(wait, self.stale_ms // 3) + random.uniform(0, self.poll_min_ms)
                await asyncio.sleep(delay / 1000.0)
        except BaseException:
            if priority is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(asyncio.shield(self._leave(endpoint, holder)), 5.0)
            raise

    async def _leave(self, endpoint: str, holder: str) -> None:
        """A waiter gives up: out of the endpoint's line (capacity_release.lua)."""
        await self._run(self.scripts.capacity_release, CapacityRelease(endpoint, True, holder, 0, -1))

    async def renew(self, grant: Grant) -> None:
        await self._run(
            self.scripts.capacity_renew, CapacityRenew(grant.endpoint, grant.holder, self.lease_ms)
        )

    async def keep(self, grant: Grant) -> None:
        """Renew the slot while the call runs (a task the caller cancels)."""
        if not grant.slot:
            return
        while True:
            await asyncio.sleep(self.lease_ms / 3000.0)
            with contextlib.suppress(Exception):  # a missed renewal costs at most an early expiry
                await self.renew(grant)

    async def hold(
        self, cfg: ProviderConfig, tokens: int, on_wait: OnWait | None = None, priority: int | None = None
    ) -> Held:
        """acquire(), plus a task renewing the slot until ``Held.release``."""
        grant = await self.acquire(cfg, tokens, on_wait, priority)
        keeper = asyncio.create_task(self.keep(grant)) if grant.slot else None
        return Held(self, grant, keeper)

    async def release(self, grant: Grant, actual_tokens: int | None) -> None:
        actual = -1 if actual_tokens is None else actual_tokens
        await self._run(
            self.scripts.capacity_release,
            CapacityRelease(grant.endpoint, False, grant.holder, grant.tokens, actual),
        )

    async def pause(self, cfg: ProviderConfig, ms: int) -> None:
        """No call to this endpoint starts for ``ms`` (a 429's Retry-After), on any worker."""
        if ms > 0:
            endpoint = endpoint_keys.endpoint_hash(cfg.base_url or "")
            await self._run(self.scripts.capacity_pause, CapacityPause(endpoint, ms))

    async def _run(self, script: Script, call: ScriptCall) -> Any:
        ks, args = call.keys(None), call.argv()
        if self.on_key is None:
            return await script(keys=ks, args=args)
        return await self.on_key(ks[0], lambda c: script(keys=ks, args=args, client=c))


class Held:
    """Capacity held for one call; ``release`` must run when the call ends, however it ends."""

    def __init__(self, limiter: ProviderLimiter, grant: Grant, keeper: asyncio.Task[None] | None) -> None:
        self.limiter, self.grant, self.keeper = limiter, grant, keeper

    async def release(self, actual_tokens: int | None) -> None:
        if self.keeper is not None:
            self.keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.keeper
        # Shielded: an abort landing now must not leave the slot taken until its lease runs out.
        with contextlib.suppress(Exception):
            await asyncio.wait_for(asyncio.shield(self.limiter.release(self.grant, actual_tokens)), 5.0)
