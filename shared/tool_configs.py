"""The tools a profile configures beside its built-in ones, and how each tool is run: HTTP tools,
MCP servers, agents as tools, and each tool's settings (timeout, retries, side effects, cache).
Kept apart from the profile that holds them (shared/profiles.py re-exports them, where most callers
import them from)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from agentmill_client import limits
from agentmill_client.models import Model

__all__ = [
    "AGENT_TOOL_PARAMETERS",
    "MCP_SEP",
    "AgentToolConfig",
    "HttpToolConfig",
    "McpServerConfig",
    "RetryConfig",
    "ToolCache",
    "ToolSettings",
]


class RetryConfig(Model):
    """Model-call retries: exponential backoff 1 s, doubling, capped at 10 s, jittered."""

    max_retries: int = Field(default=3, ge=0, le=20)
    base_delay_ms: int = Field(default=1_000, ge=0)
    max_delay_ms: int = Field(default=10_000, ge=0)
    jitter: float = Field(default=0.2, ge=0, le=1)
    retry_after_cap_ms: int = Field(default=60_000, ge=0)


class ToolCache(Model):
    """A tool's results reused for the same arguments and tenant (worker/adapters/tool_cache.py)."""

    ttl_s: int = Field(ge=1, le=7 * 24 * 3_600)


class ToolSettings(Model):
    requires_approval: bool = False
    # Opt-in result cache. Never for a tool marked sideEffects: true; an HTTP tool must declare
    # sideEffects: false to be cached (the profile is refused otherwise).
    cache: ToolCache | None = None
    side_effects: bool | None = None
    timeout_s: float = Field(default=30.0, gt=0, le=limits.MAX_TOOL_TIMEOUT_S)
    max_tries: int = Field(default=3, ge=1, le=20)
    retry_delay_ms: int = Field(default=1_000, ge=0, le=limits.MAX_TOOL_RETRY_DELAY_MS)


class HttpToolConfig(Model):
    """A tool that POSTs {runId, toolCallId, name, arguments} to a URL with an Idempotency-Key."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object"})
    url: str
    method: Literal["POST", "PUT"] = "POST"
    headers: dict[str, str] = Field(default_factory=dict)  # a value "env:NAME" is read from the environment
    allow_hosts: list[str] = Field(default_factory=list)  # hosts exempt from the private-address guard
    max_response_chars: int = 16_000


MCP_SEP = "__"  # a server's tool is offered to the model as "<server>__<tool>"


class McpServerConfig(Model):
    """An MCP server (streamable HTTP) whose tools a profile offers as ``<name>__<tool>``.

    Header values may name the worker's environment variables (``${env:NAME}`` anywhere in the
    value, or the whole value ``env:NAME`` as for HTTP tools); a RunInput can never set them."""

    name: str = Field(pattern=r"^[A-Za-z0-9-]+(_[A-Za-z0-9-]+)*$", max_length=32)  # no "__" inside
    url: str
    headers: dict[str, str] = Field(default_factory=dict)
    allow_tools: list[str] | None = None  # the server's tool names offered (None: all)
    timeout_s: float = Field(default=30.0, gt=0, le=limits.MAX_TOOL_TIMEOUT_S)  # one tools/call attempt
    max_concurrent: int | None = Field(default=None, ge=1, le=1_000)  # calls under way per worker
    tools_ttl_s: float = Field(default=60.0, ge=0, le=86_400)  # how long a worker keeps a listing
    allow_hosts: list[str] = Field(default_factory=list)  # hosts exempt from the private-address guard


AGENT_TOOL_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {"task": {"type": "string", "description": "what the agent is to do, in full"}},
    "required": ["task"],
}


class AgentToolConfig(Model):
    """A sub-agent: a tool whose call runs another profile's agent as a child run (shared/children.py)
    on the call's ``task``; the child's answer (or its error) is the call's result."""

    kind: Literal["agent"] = "agent"
    agent: str = Field(min_length=1, max_length=128)  # the child's profile
    name: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_-]{1,64}$")  # default: the agent's name
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: dict(AGENT_TOOL_PARAMETERS))

    @property
    def tool_name(self) -> str:
        return self.name or self.agent
