"""The tenants whose schedules fire: those a running API process's tokens name (``default`` always).

Each API process says which tenants its tokens name (AGENTMILL_API_TOKENS,
AGENTMILL_API_TOKENS_FILE; auth off: ``default`` alone) as it starts and then every third of
AGENTMILL_LIVE_TENANTS_TTL_MS (``beat_live_tenants``): each of them is live until the TTL from then
(live_tenants.lua; one sorted set at partition 0, a tenant's latest "until" kept, never shortened
by another process). The live tenants are so the union of what the running API processes name,
however their token sets differ: a process that stops (or restarts without a tenant's token) stops
naming it, and the tenant is held once the TTL has passed since the last process named it.

Workers hold no tokens: their firers read the set at every look (producer.schedules.firer) and hold
the schedules of a tenant it does not name (not fired; ``pausedReason`` says why) until a process
names it again. No set (no API process has started on this Redis: the Python producer alone):
every tenant's schedules fire.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError

from shared.calls.schedules import SayLiveTenants
from shared.quotas import DEFAULT_TENANT
from shared.replies import text
from shared.script_sending import Parts, run_script
from shared.scripts import Scripts

__all__ = ["LiveTenants", "beat_live_tenants", "publish_live_tenants", "read_live_tenants"]

log = logging.getLogger("agentmill.schedules")


class LiveTenants:
    """The live tenants as read: tenant -> until when (ms, Redis time) a process named it."""

    def __init__(self, until: dict[str, int]) -> None:
        self.until = until

    def named(self, tenant: str, now_ms: int) -> bool:
        """Whether a running API process names ``tenant`` at ``now_ms`` (Redis time)."""
        return tenant == DEFAULT_TENANT or self.until.get(tenant, 0) > now_ms


async def publish_live_tenants(parts: Parts, scripts: Scripts, tenants: Iterable[str], ttl_ms: int) -> int:
    """Say that ``tenants`` (and ``default``) are live for ``ttl_ms`` from now; returns Redis's now."""
    part = parts.parts[0]
    names = sorted({*tenants, DEFAULT_TENANT})
    call = SayLiveTenants(ttl_ms, tuple(names))
    now = await run_script(parts, scripts.live_tenants, part, call.keys(part), call.argv())
    return int(now)


async def beat_live_tenants(
    parts: Parts,
    scripts: Scripts,
    tenants: Iterable[str],
    ttl_ms: int,
    stop: asyncio.Event,
    in_outage: Callable[[BaseException], bool] | None = None,
) -> None:
    """Say ``tenants`` are live again every third of ``ttl_ms`` until ``stop`` (an API process's
    loop; its first word is said as it starts: producer.api.app)."""
    names = list(tenants)
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), ttl_ms / 3000)
        if stop.is_set():
            return
        try:
            await publish_live_tenants(parts, scripts, names, ttl_ms)
        except (RedisError, OSError) as exc:
            quiet = in_outage is not None and in_outage(exc)
            log.log(logging.DEBUG if quiet else logging.WARNING, "schedules: live tenants not said: %s", exc)
        except Exception:  # a bug must not end the beat for good: the tenants would be held
            log.exception("schedules: live tenants not said")


async def read_live_tenants(parts: Parts) -> LiveTenants | None:
    """The live tenants; None when none were ever published (every tenant fires)."""
    part = parts.parts[0]

    async def read(c: Redis) -> Any:
        return await c.zrange(part.live_tenants, 0, -1, withscores=True)

    found = await parts.call(part, read)
    return LiveTenants({text(t): int(s) for t, s in found}) if found else None
