"""Agents on the wire: what the ``/v1/agents`` calls take (AgentPointer) and answer (AgentView,
AgentVersionView, AgentsPage). A tenant's agent is a profile kept through the API, in numbered
immutable versions; the operator's profiles are listed beside them, read-only (``source``).
Attributes are snake_case, the JSON camelCase (base.Model, base.Answer)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from agentmill_client.base import Answer, Model

__all__ = ["AgentPointer", "AgentVersionView", "AgentView", "AgentsPage", "RampSpec", "VersionStamp"]


class RampSpec(Model):
    """A share of the agent's new runs that get ``version`` instead of the current one, chosen from
    each run's id (the same id always gets the same version); percent 0 ends the ramp."""

    version: int = Field(ge=1)
    percent: float = Field(ge=0, le=100)


class AgentPointer(Model):
    """``POST /v1/agents/{name}/current``: the version new runs get (roll back or forward), and/or a
    ramp (``null``: none)."""

    version: int | None = Field(default=None, ge=1)
    ramp: RampSpec | None = None


class VersionStamp(Answer):
    version: int
    created_at: int = Field(description="epoch ms")


class AgentView(Answer):
    name: str
    source: Literal["tenant", "operator"] = Field(
        description="tenant: kept through this API, in versions; operator: a profile of the operator's "
        "file (AGENTMILL_PROFILES), read-only"
    )
    current_version: int | None = Field(default=None, description="the version new runs get")
    latest_version: int | None = None
    ramp: RampSpec | None = None
    versions: list[VersionStamp] = Field(default_factory=list)
    created_at: int | None = None
    updated_at: int | None = None
    profile: dict[str, Any] | None = Field(
        default=None, description="the current version's profile (GET /v1/agents/{name} only)"
    )


class AgentVersionView(Answer):
    name: str
    version: int
    created_at: int
    profile: dict[str, Any] = Field(description="the profile as it was given")


class AgentsPage(Answer):
    agents: list[AgentView]
