"""The settings of agents kept through the API (docs/operations.md#agents): the operator's provider
connections a tenant's agent may name, and how many agents and versions a tenant keeps.
``Settings`` (shared/settings.py) holds them with the rest."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["AgentSettings"]


class AgentSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="AGENTMILL_", extra="ignore", populate_by_name=True)

    providers: str | None = Field(
        default=None,
        description='path of a JSON file of provider connections (`{"providers": {name: {kind, baseUrl, '
        "apiKeyEnv, maxConcurrent, …}}}`) that a tenant's agent names in `provider.connection`; unset: the "
        "built-in `calculator` only (and `scripted` with `AGENTMILL_DEV_PROFILES`)",
    )
    max_agents: int = Field(
        default=100, ge=1, le=10_000, description="agents a tenant keeps through `POST /v1/agents`"
    )
    max_agent_versions: int = Field(
        default=100, ge=1, le=10_000, description="versions one agent of a tenant may have, numbered from 1"
    )
