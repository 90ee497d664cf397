"""What a tenant may put in an agent it keeps through the API (POST /v1/agents), narrower than the
operator's profile file: pure checks, each refusal naming the field.

- ``provider`` names an operator connection (``provider.connection``, shared/connections.py) and
  may choose the model and how it is called (model, temperature, maxTokens, toolChoice, extraBody,
  responseFormatStyle, imageParts); never a URL, a key, a kind or limits of its own, and no
  extraBody key that overrides what the pool sends or prices (the model, the messages, the token
  bound, the number of choices: RESERVED_EXTRA_BODY).
- HTTP tools and MCP servers: their URLs are judged by the outbound guard's rules now (and the
  worker's guarded client judges every address it reaches); no ``allowHosts`` exemption, and no
  header read from the worker's environment (``env:NAME``, ``${env:NAME}``).
- Sub-agents (``agentTools``) name the operator's profiles only.
- Limits only narrow the operator's: ``maxPriority`` at most the tenant's quota maxPriority,
  ``loopLimits.maxDepth`` at most the default sub-agent depth (a root run's profile sets its tree's),
  ``loopLimits.maxRunDurationMs`` at most AGENTMILL_RUN_DURATION_MAX_MS; the test-only tools only
  with AGENTMILL_DEV_PROFILES.

``build`` turns a stored body into the profile a worker runs (the connection as the worker knows it
now); ``checked`` applies the rules first (the API, at creation)."""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from pydantic import ValidationError
from pydantic.alias_generators import to_camel

from shared.netguard_rules import host_refusal
from shared.profiles import DEFAULT_MAX_DEPTH, DEV_TOOLS, AgentProfile
from shared.provider_config import ProviderConfig

__all__ = ["NAME_PATTERN", "AgentRefusal", "build", "checked", "parse_ref"]

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
_NAME = re.compile(NAME_PATTERN)
# What a tenant's provider may set beside its connection (camelCase, as the JSON spells them).
TENANT_PROVIDER_FIELDS = frozenset(
    {"connection", "model", "temperature", "maxTokens", "toolChoice", "extraBody", "responseFormatStyle",
     "imageParts", "promptCaching", "promptCacheKey", "thinking"}
)  # fmt: skip
# extraBody keys a tenant may not set: what the worker's request body sets itself (extraBody is merged
# over it), and what changes what a call costs past what its budget is priced and reserved on.
RESERVED_EXTRA_BODY = frozenset(
    {"model", "messages", "stream", "stream_options", "tools", "tool_choice", "functions", "function_call",
     "response_format", "temperature", "max_tokens", "max_completion_tokens", "n", "best_of"}
)  # fmt: skip
_ENV = re.compile(r"^env:|\$\{env:")
_NAMED = re.compile(r"^([A-Za-z][A-Za-z0-9_.]*): ")


class AgentRefusal(ValueError):
    """A tenant's agent breaking a rule: ``field`` (camelCase path) and what is wrong."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = f"{field}: {message}"


def parse_ref(agent: str) -> tuple[str, int | None]:
    """``support@7`` -> ("support", 7); ``support`` -> ("support", None). Only ASCII digits name a
    version (``²`` is a digit to str.isdigit that int() refuses; ``١`` would name 1)."""
    name, sep, version = agent.rpartition("@")
    if sep and name and version.isascii() and version.isdigit() and len(version) <= 9:
        return name, int(version)
    return agent, None


def _camel(body: Mapping[str, Any]) -> dict[str, Any]:
    return {to_camel(k) if "_" in k else k: v for k, v in body.items()}


def build(body: Mapping[str, Any], connections: Mapping[str, ProviderConfig]) -> AgentProfile:
    """The profile of a tenant's stored agent body: its provider the named connection with the
    tenant's choices over it. AgentRefusal naming the field when it cannot be one."""
    body = _camel(body)
    provider = body.get("provider")
    if not isinstance(provider, dict):
        raise AgentRefusal("provider", 'name an operator connection: {"connection": "<name>", "model": …}')
    provider = _camel(provider)
    name = provider.get("connection")
    if not isinstance(name, str) or name not in connections:
        known = ", ".join(sorted(connections))
        raise AgentRefusal("provider.connection", f"no connection named {name!r} (the operator's: {known})")
    merged = {**connections[name].model_dump(by_alias=True, exclude_none=True),
              **{k: v for k, v in provider.items() if k != "connection"}}  # fmt: skip
    try:
        return AgentProfile.model_validate({**body, "provider": merged})
    except ValidationError as exc:
        e = exc.errors(include_url=False)[0]
        msg = str(e["msg"]).removeprefix("Value error, ")
        field = ".".join(str(x) for x in e["loc"])
        if not field and (m := _NAMED.match(msg)):  # a whole-profile check names its field first
            field, msg = m.group(1), msg[m.end() :]
        raise AgentRefusal(field or "body", msg) from None


def checked(
    body: Mapping[str, Any],
    connections: Mapping[str, ProviderConfig],
    operator: Mapping[str, AgentProfile],
    *,
    max_priority: int,
    duration_max_ms: int,
    dev: bool,
) -> AgentProfile:
    """The tenant's agent profile, every rule above applied first; else AgentRefusal."""
    body = _camel(body)
    name = body.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        raise AgentRefusal("name", f"a name of 1-64 letters, digits, '.', '_' or '-' ({NAME_PATTERN})")
    if name in operator:
        raise AgentRefusal("name", f"{name!r} is an operator's profile (read-only); choose another name")
    provider = body.get("provider")
    if isinstance(provider, dict):
        for key in _camel(provider):
            if key not in TENANT_PROVIDER_FIELDS:
                raise AgentRefusal(
                    f"provider.{key}",
                    "a tenant's agent names an operator connection (provider.connection); its URL, key, "
                    f"kind and limits are the operator's (may set: {', '.join(sorted(TENANT_PROVIDER_FIELDS))})",
                )
        extra = _camel(provider).get("extraBody")
        for key in extra if isinstance(extra, dict) else ():
            if key in RESERVED_EXTRA_BODY:
                raise AgentRefusal(
                    f"provider.extraBody.{key}",
                    "the pool sets it (model, maxTokens, temperature and toolChoice are the provider's own "
                    "fields), or it changes what a call costs past what its budget is priced on",
                )
    for kind in ("httpTools", "mcpServers"):
        for i, tool in enumerate(_listed(body.get(kind))):
            if isinstance(tool, dict):
                _check_outbound(f"{kind}.{i}", _camel(tool))
    for i, tool in enumerate(_listed(body.get("agentTools"))):
        child = tool.get("agent") if isinstance(tool, dict) else None
        if child not in operator:
            raise AgentRefusal(
                f"agentTools.{i}.agent",
                f"a tenant's agent hands tasks to the operator's profiles only ({', '.join(sorted(operator))})",
            )
    profile = build(body, connections)
    if profile.max_priority > max_priority:
        raise AgentRefusal("maxPriority", f"at most the tenant's quota maxPriority {max_priority}")
    depth = profile.loop_limits.max_depth
    if depth is not None and depth > DEFAULT_MAX_DEPTH:
        raise AgentRefusal(
            "loopLimits.maxDepth", f"at most the deployment's sub-agent depth {DEFAULT_MAX_DEPTH}"
        )
    duration = profile.loop_limits.max_run_duration_ms
    if duration is not None and duration > duration_max_ms:
        raise AgentRefusal(
            "loopLimits.maxRunDurationMs", f"at most the deployment's maximum {duration_max_ms} ms"
        )
    dev_tools = sorted(DEV_TOOLS.intersection(profile.tools))
    if dev_tools and not dev:
        near = difflib.get_close_matches(dev_tools[0], ["calculator"], n=1)
        raise AgentRefusal(
            "tools", f"{', '.join(dev_tools)} are test tools{' (calculator?)' if near else ''}"
        )
    return profile


def _listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _check_outbound(where: str, tool: dict[str, Any]) -> None:
    url = tool.get("url")
    if isinstance(url, str):
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https"):
            raise AgentRefusal(f"{where}.url", "an http:// or https:// URL")
        if why := host_refusal(parts.hostname or ""):
            raise AgentRefusal(f"{where}.url", f"its host may not be reached: {why}")
    if tool.get("allowHosts"):
        raise AgentRefusal(f"{where}.allowHosts", "the outbound guard has no exemptions for a tenant's agent")
    headers = tool.get("headers")
    for key, value in (headers if isinstance(headers, dict) else {}).items():
        if isinstance(value, str) and _ENV.search(value):
            raise AgentRefusal(
                f"{where}.headers.{key}", "a tenant's agent cannot read the worker's environment"
            )
