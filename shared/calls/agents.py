"""Calls that change a tenant's agents (producer/agents.py): its next version, its pointers."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from shared.calls.base import ScriptCall
from shared.keys import Partition

__all__ = ["AgentCreate", "AgentCreateVerdict", "AgentPoint", "AgentPointVerdict"]


class AgentCreateVerdict(StrEnum):
    CREATED = "created"  # (the version second)
    FULL = "full"  # the tenant has its most agents (how many second)
    VERSIONS_FULL = "versions_full"  # the agent has its most versions (the latest second)


@dataclass(frozen=True, slots=True)
class AgentCreate(ScriptCall):
    """agent_create.lua: a tenant's agent gets its next version (1 when new, or deleted and
    forgotten)."""

    SCRIPT = "agent_create"
    KEY_NAMES = ("agents", "versions")  # name -> pointers JSON; name@n -> profile JSON
    VERDICT = AgentCreateVerdict

    tenant: str
    name: str
    profile: bytes | str  # the version's profile JSON
    make_current: str  # '1' | ''
    max_agents: int
    max_versions: int
    keep_ms: int  # how long a deleted agent's versions stay readable to its running runs

    def keys(self, part: Partition) -> list[str]:
        return [part.agents(self.tenant), part.agent_versions(self.tenant)]


class AgentPointVerdict(StrEnum):
    OK = "ok"  # (the pointers JSON second)
    UNKNOWN = "unknown"
    NO_VERSION = "no_version"  # (the latest version second)


@dataclass(frozen=True, slots=True)
class AgentPoint(ScriptCall):
    """agent_point.lua: a tenant's agent's pointers change: its current version, its ramp, or
    deleted (its versions stay readable to the runs using them until they are forgotten)."""

    SCRIPT = "agent_point"
    KEY_NAMES = ("agents",)
    VERDICT = AgentPointVerdict

    tenant: str
    name: str
    what: str  # 'current' | 'ramp' | 'delete'
    version: str  # '' for none
    percent: str

    def keys(self, part: Partition) -> list[str]:
        return [part.agents(self.tenant)]
