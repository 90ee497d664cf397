"""The tool-result cache (the design documents' cache of repeated tool calls): opt-in per tool
(``toolSettings.<tool>.cache.ttlS`` in the profile; never for a tool with side effects, and for an
HTTP tool only when it declares ``sideEffects: false``: shared/profiles.py refuses the rest).

A result is keyed by the tenant, the tool and a digest of its canonical arguments (JSON with sorted
keys), so two tenants never share one; it lives in Redis (``Partition.tool_cache``, in the run's
partition) for ``ttlS``. Only results that are not errors are kept. A hit is served as the call's
result with ``cached: true`` on its ``tool_result`` event, counted as the outcome ``cached`` of
``agentmill_tool_calls``. The cache saves work, it is no promise: two runs calling at once may both
execute.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

from agentmill_client.models import ToolCall, ToolResult
from shared import keys, payload_crypto
from shared.calls.steps import ToolCachePut
from shared.fields import RunField
from shared.partitions import Partitions
from shared.quotas import DEFAULT_TENANT
from shared.scripts import Scripts, text
from worker.ports import Clock

__all__ = ["MemoryToolCache", "RedisToolCache", "cache_digest", "canonical_arguments"]


def canonical_arguments(arguments: str) -> bytes:
    """The arguments as JSON with sorted keys and no spaces (the raw text when it is not JSON)."""
    try:
        return orjson.dumps(orjson.loads(arguments or "{}"), option=orjson.OPT_SORT_KEYS)
    except orjson.JSONDecodeError:
        return arguments.encode()


def cache_digest(tenant: str, call: ToolCall) -> str:
    h = hashlib.sha256()
    for part in (tenant.encode(), call.name.encode(), canonical_arguments(call.arguments)):
        h.update(len(part).to_bytes(8, "big") + part)
    return h.hexdigest()[:40]


def served(call: ToolCall, raw: bytes | str) -> ToolResult:
    """A cached result, as this call's result."""
    stored = payload_crypto.loads(raw)
    return ToolResult(
        tool_call_id=call.id, name=call.name, content=str(stored.get("content", "")), cached=True
    )


class RedisToolCache:
    """One run's view of the cache: its tenant (read once from the run hash) and its partition. A put
    (tool_cache_put.lua) notes the key with the run, for the run's deletion, and writes nothing once
    the run is gone."""

    def __init__(self, parts: Partitions[Any], scripts: Scripts, part: keys.Partition, run_id: str) -> None:
        self.parts, self.scripts, self.part, self.run_id = parts, scripts, part, run_id
        self._tenant: str | None = None

    async def _key(self, call: ToolCall) -> str:
        if self._tenant is None:
            run = self.part.run(self.run_id)
            raw = await self.parts.call(self.part, lambda c: c.hget(run, RunField.TENANT.value))
            self._tenant = text(raw) if raw else DEFAULT_TENANT
        return self.part.tool_cache(self._tenant, call.name, cache_digest(self._tenant, call))

    async def get(self, call: ToolCall) -> ToolResult | None:
        key = await self._key(call)
        raw = await self.parts.call(self.part, lambda c: c.get(key))
        return served(call, raw) if raw is not None else None

    async def put(self, call: ToolCall, result: ToolResult, ttl_s: int) -> None:
        if result.is_error:
            return
        key = await self._key(call)
        body = payload_crypto.active().seal_json(orjson.dumps({"content": result.content}))
        p = self.part
        put = ToolCachePut(body, ttl_s)
        k, a = self.scripts.frame(p, put.keys(p, self.run_id, key), put.argv())
        await self.parts.call(p, lambda c: self.scripts.tool_cache_put(keys=k, args=a, client=c))


class MemoryToolCache:
    """The same in memory, for tests: one tenant, expiry by the given clock."""

    def __init__(self, clock: Clock, tenant: str = DEFAULT_TENANT) -> None:
        self.clock, self.tenant = clock, tenant
        self.entries: dict[str, tuple[int, bytes]] = {}

    async def get(self, call: ToolCall) -> ToolResult | None:
        hit = self.entries.get(cache_digest(self.tenant, call))
        return served(call, hit[1]) if hit is not None and hit[0] > self.clock.now_ms() else None

    async def put(self, call: ToolCall, result: ToolResult, ttl_s: int) -> None:
        if not result.is_error:
            until = self.clock.now_ms() + ttl_s * 1000
            self.entries[cache_digest(self.tenant, call)] = (until, orjson.dumps({"content": result.content}))
