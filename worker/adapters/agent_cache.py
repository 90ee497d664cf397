"""The versions of tenants' agents (POST /v1/agents) a worker runs, by (tenant, name, version).

A version is immutable, so once read it is kept for good, in a bounded LRU (``MAX_ENTRIES``): a
worker sees a new version the moment a run pinned to it arrives, with no restart and no polling,
and a run pinned to one keeps it from its start to its end, a crash-resume on another worker
included (the version is in the run's input). The API chose the version at submission
(producer.agents); a worker never reads an agent's current version or ramp.

The profile is built from the version as its tenant gave it and this worker's connections
(AGENTMILL_PROVIDERS, shared/connections.py): a connection the worker does not know fails the run
with a reason naming it."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import orjson
from redis.asyncio import Redis

from shared import agent_rules
from shared.partitions import Partitions
from shared.profiles import AgentProfile
from shared.provider_config import ProviderConfig
from shared.quotas import DEFAULT_TENANT

__all__ = ["MAX_ENTRIES", "AgentVersions", "UnknownVersionError"]

MAX_ENTRIES = 512


class UnknownVersionError(LookupError):
    pass


class AgentVersions:
    """The agent versions one worker process has read (see the module's docstring)."""

    def __init__(
        self, parts: Partitions[Any], connections: dict[str, ProviderConfig], max_entries: int = MAX_ENTRIES
    ) -> None:
        self.parts = parts
        self.connections = connections
        self._entries: OrderedDict[tuple[str, str, int], AgentProfile] = OrderedDict()
        self._max = max_entries
        self.reads = 0  # versions read from Redis

    def __len__(self) -> int:
        return len(self._entries)

    async def get(self, tenant: str, name: str, version: int) -> AgentProfile:
        tenant = tenant or DEFAULT_TENANT
        key = (tenant, name, version)
        hit = self._entries.get(key)
        if hit is not None:
            self._entries.move_to_end(key)
            return hit
        part = self.parts.layout.home(tenant)

        async def go(c: Redis) -> Any:
            return await c.hget(part.agent_versions(tenant), f"{name}@{version}")  # type: ignore[misc]

        self.reads += 1
        raw = await self.parts.call(part, go)
        if raw is None:
            raise UnknownVersionError(f"version {version} of agent {name!r} is no longer kept")
        try:
            profile = agent_rules.build(orjson.loads(raw), self.connections)
        except agent_rules.AgentRefusal as exc:
            raise UnknownVersionError(f"version {version} of agent {name!r}: {exc.message}") from None
        self._entries[key] = profile
        while len(self._entries) > self._max:
            self._entries.popitem(last=False)
        return profile
