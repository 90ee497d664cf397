"""The tenants whose schedules fire: those the API's tokens name (``default`` always).

Every API process publishes, as it starts, the tenants its tokens name (AGENTMILL_API_TOKENS,
AGENTMILL_API_TOKENS_FILE; auth off: ``default`` alone) to one Redis set at partition 0, replacing
the set a process published before; the set has no TTL. Workers hold no tokens: their firers read
the set at every look (producer.schedules.firer) and hold the schedules of a tenant it does not
name (not fired; ``pausedReason`` says why) until a process publishes it again. No set (no API
process has started on this Redis: the Python producer alone): every tenant's schedules fire.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from redis.asyncio import Redis

from producer.routing import Parts
from shared.quotas import DEFAULT_TENANT
from shared.scripts import text

__all__ = ["publish_live_tenants", "read_live_tenants"]


async def publish_live_tenants(parts: Parts, tenants: Iterable[str]) -> None:
    """Replace the published set with ``tenants`` (and ``default``), at once."""
    part = parts.parts[0]
    names = sorted({*tenants, DEFAULT_TENANT})

    async def write(c: Redis) -> Any:
        async with c.pipeline(transaction=True) as pipe:
            pipe.delete(part.live_tenants)
            pipe.sadd(part.live_tenants, *names)
            return await pipe.execute()

    await parts.call(parts.parts[0], write)


async def read_live_tenants(parts: Parts) -> frozenset[str] | None:
    """The published tenants; None when none were ever published (every tenant fires)."""
    part = parts.parts[0]

    async def read(c: Redis) -> Any:
        return await c.smembers(part.live_tenants)  # type: ignore[misc]

    found = await parts.call(part, read)
    return frozenset(text(t) for t in found) if found else None
