"""Agent profiles: the named configurations a RunInput refers to by `agent`.

Workers and the API load the same file (``AGENTMILL_PROFILES``, JSON: ``{"profiles": [...]}``);
with none set, the built-in profiles below are used. Callers never send model keys: a profile
names the environment variable or mounted file that holds one.

A profile's agent rules are here: its tools, limits, context and compaction, and how they are
loaded; its providers (connections, fallback chains, pricing) are in shared/provider_config.py.
"""

from __future__ import annotations

import difflib
from functools import lru_cache
from pathlib import Path
from typing import Literal

import orjson
from pydantic import Field, ValidationError, field_validator, model_validator

from agentmill_client import limits
from agentmill_client.models import Budget, ClientTool, LoopLimits, Model, ToolPolicy
from shared.anthropic_config import ANTHROPIC_BASE_URL, ANTHROPIC_MAX_TOKENS, ThinkingConfig
from shared.prices import PriceTier, Pricing
from shared.profile_refusals import PROFILES_ENV, describe_profile_errors
from shared.provider_config import (
    FALLBACK_CLASSES,
    MAX_PROVIDERS,
    EconomyConfig,
    FallbackClass,
    ProviderConfig,
    unpriced_message,
)
from shared.settings_errors import SettingsError
from shared.tool_configs import (
    AGENT_TOOL_PARAMETERS,
    MCP_SEP,
    AgentToolConfig,
    HttpToolConfig,
    McpServerConfig,
    RetryConfig,
    ToolCache,
    ToolSettings,
)

_DEFAULT_TOOL_SETTINGS = ToolSettings()  # frozen: one instance serves every tool without settings

__all__ = [
    "AGENT_TOOL_PARAMETERS",
    "ANTHROPIC_BASE_URL",
    "ANTHROPIC_MAX_TOKENS",
    "BUILTIN_PROFILES",
    "BUILTIN_TOOLS",
    "DEFAULT_MAX_DEPTH",
    "DEV_PROFILES_ENV",
    "DEV_TOOLS",
    "MCP_SEP",
    "AgentProfile",
    "AgentToolConfig",
    "CompactionConfig",
    "ContextConfig",
    "HttpToolConfig",
    "McpServerConfig",
    "PriceTier",
    "Pricing",
    "ProfileFile",
    "RetryConfig",
    "ThinkingConfig",
    "ToolCache",
    "ToolSettings",
    "dev_profiles_enabled",
    "load_profiles",
    "profiles_from",
]

# Test-only parts: a scripted model in ``script`` mode follows the caller's runtimeHints (sleeps,
# echoes, stalls on request) and these tools sleep, echo or fail on a caller's say-so. They are
# loaded only with AGENTMILL_DEV_PROFILES=true (the tests and the bench set it).
DEFAULT_MAX_DEPTH = 3  # sub-agent nesting when the profile sets none: a root run's children are at depth 1
DEV_TOOLS = frozenset({"echo", "sleep", "fail", "flaky"})
DEV_PROFILES_ENV = "AGENTMILL_DEV_PROFILES"
MAX_PREAMBLE_CHARS = 8_000  # a profile's own preamble (preambleText)
# The names a profile's ``tools`` may list: worker/tools/builtin.py's tools (a unit test holds them equal).
BUILTIN_TOOLS = frozenset({"calculator", *DEV_TOOLS})


class ContextConfig(Model):
    """Run-loop context windows."""

    max_run_loops: int = Field(default=10, ge=0)
    max_message_length: int = Field(default=500, ge=1)
    max_time_range_ms: int = Field(default=7 * 24 * 3_600_000, ge=0)
    # The context tools load_older_history and search_history: offered when true; unset, to a run
    # with a session (false: never). A run offered them loads up to maxHistoryLoops past turns,
    # shows the newest maxRunLoops of them, and each load_older_history shows
    # expandContextWindowSize more messages (names from the design documents: docs/design/seeds-audit.md); search_history answers at most
    # searchMaxResults hits. A run's configuration holds the resolved true or false.
    history_tools: bool | None = None
    max_history_loops: int = Field(default=50, ge=0, le=limits.SESSION_LOOPS_KEPT)
    expand_context_window_size: int = Field(default=10, ge=1, le=1_000)
    search_max_results: int = Field(default=8, ge=1, le=50)

    def loaded_loops(self) -> int:
        """The past turns a run loads: with the context tools, as many as it may widen to."""
        return max(self.max_run_loops, self.max_history_loops) if self.history_tools else self.max_run_loops


class CompactionConfig(Model):
    max_messages: int = Field(default=60, ge=4)
    max_estimated_tokens: int = Field(default=100_000, ge=100)
    keep_recent: int = Field(default=8, ge=1)
    use_model: bool = False
    max_overflow_retries: int = Field(default=2, ge=0)
    # truncate | summary | keyFacts | importance (worker/core/compaction.py); None: summary with
    # useModel, else truncate
    strategy: Literal["truncate", "summary", "keyFacts", "importance"] | None = None
    importance_budget_tokens: int = Field(default=4_000, ge=0)  # what importance keeps of the middle

    def resolved_strategy(self) -> str:
        return self.strategy or ("summary" if self.use_model else "truncate")


class AgentProfile(Model):
    name: str
    provider: ProviderConfig = Field(default_factory=ProviderConfig)
    # A fallback chain in place of ``provider``: the primary first. A model call that fails with a
    # class in ``fallbackOn`` moves on to the next (worker/machine/fallback.py); ``provider`` is
    # then the primary.
    providers: list[ProviderConfig] | None = Field(default=None, min_length=1, max_length=MAX_PROVIDERS)
    fallback_on: list[FallbackClass] = Field(default_factory=lambda: list(FALLBACK_CLASSES))
    system_prompt: str = "You are a helpful assistant."
    # What the system prompt begins with (worker/core/preamble.py): "v1" the built-in rules (untrusted
    # tool results, no secrets repeated, failures said as failures), "custom" preambleText instead,
    # "off" nothing. While a preamble is on, tool results reach the model framed as data.
    preamble: Literal["v1", "custom", "off"] = "v1"
    preamble_text: str | None = Field(default=None, min_length=1, max_length=MAX_PREAMBLE_CHARS)
    economy: EconomyConfig = Field(default_factory=EconomyConfig)
    tools: list[str] = Field(default_factory=list)  # built-in tool names
    http_tools: list[HttpToolConfig] = Field(default_factory=list)
    mcp_servers: list[McpServerConfig] = Field(default_factory=list)  # tools listed from MCP servers
    agent_tools: list[AgentToolConfig] = Field(default_factory=list)  # sub-agents
    tool_settings: dict[str, ToolSettings] = Field(default_factory=dict)
    loop_limits: LoopLimits = Field(default_factory=LoopLimits)
    budget: Budget = Field(default_factory=Budget)  # the most a run may spend; a RunInput's only narrows it
    tool_policy: ToolPolicy = Field(default_factory=ToolPolicy)
    retry: RetryConfig = Field(default_factory=RetryConfig)
    context: ContextConfig = Field(default_factory=ContextConfig)
    compaction: CompactionConfig = Field(default_factory=CompactionConfig)
    # Reaching loopLimits.maxIterations / maxToolRounds: "answer" makes one last model call without
    # tools for the final answer (the run completes, result.stopReason names the limit); "fail"
    # ends the run failed with the limit as its error.
    on_limit: Literal["answer", "fail"] = "answer"
    # Tools the caller executes (execution "client"), and the names a RunInput's clientTools may
    # declare ("*": any name not taken by the profile's own tools).
    client_tools: list[ClientTool] = Field(default_factory=list)
    run_client_tools: list[str] = Field(default_factory=list)
    client_tool_timeout_ms: int = Field(default=600_000, ge=1, le=7 * 24 * 3_600_000)  # per call
    # The highest priority a run of this agent gets (a higher RunInput.priority is lowered to it),
    # beside the tenant's quota maxPriority: the lower of the two applies.
    max_priority: int = Field(default=limits.MAX_PRIORITY, ge=limits.MIN_PRIORITY, le=limits.MAX_PRIORITY)
    # The default of its runs' RunInput.storeContent: false keeps no message or tool content once a run
    # ends (resolved into the run's input at submission).
    store_content: bool = True

    @model_validator(mode="after")
    def _preamble_text_with_custom(self) -> AgentProfile:
        if self.preamble == "custom" and self.preamble_text is None:
            raise ValueError('preamble "custom" needs preambleText: the text the system prompt begins with')
        if self.preamble != "custom" and self.preamble_text is not None:
            raise ValueError(
                f'preambleText is only read with preamble "custom" (this profile has "{self.preamble}")'
            )
        return self

    @model_validator(mode="after")
    def _known_tools_and_a_whole_provider(self) -> AgentProfile:
        """Refused when loaded, not when a run first asks for the tool or the model."""
        for tool in self.tools:
            if tool not in BUILTIN_TOOLS:
                near = difflib.get_close_matches(tool, sorted(BUILTIN_TOOLS), n=1)
                hint = f"did you mean {near[0]!r}? " if near else ""
                raise ValueError(
                    f"tools: no built-in tool named {tool!r} ({hint}built-in tools: "
                    f"{', '.join(sorted(BUILTIN_TOOLS))}; HTTP tools go in httpTools, MCP servers in mcpServers)"
                )
        for where, p in self._declared():
            if p.kind in ("openai", "anthropic") and (p.base_url is None or p.model is None):
                missing = [n for n, v in (("baseUrl", p.base_url), ("model", p.model)) if v is None]
                raise ValueError(f"{where}: an {p.kind} provider needs {' and '.join(missing)}")
            if p.thinking is not None and p.kind != "anthropic":
                raise ValueError(f"{where}: thinking is read only by an anthropic provider")
            if (
                p.thinking is not None
                and p.max_tokens is not None
                and p.thinking.budget_tokens >= p.max_tokens
            ):
                raise ValueError(f"{where}: thinking.budgetTokens must be below maxTokens")
            if p.thinking is not None and p.temperature not in (None, 1):
                raise ValueError(
                    f"{where}: with thinking, temperature may only be 1 (the API refuses others)"
                )
            if p.thinking is not None and p.tool_choice not in (None, "auto", "none"):
                raise ValueError(
                    f'{where}: with thinking, toolChoice may only be "auto" or "none" (the API refuses others)'
                )
        return self

    def _declared(self) -> list[tuple[str, ProviderConfig]]:
        if self.providers is None:
            return [("provider", self.provider)]
        return [(f"providers.{i}", p) for i, p in enumerate(self.providers)]

    @model_validator(mode="after")
    def _one_chain(self) -> AgentProfile:
        """``providers`` replaces ``provider`` (which then names the primary); names are unique."""
        if self.providers is None:
            return self
        if "provider" in self.model_fields_set and self.provider != self.providers[0]:  # (a dump's copy is)
            raise ValueError("provider and providers: give one (providers lists the primary first)")
        names = self.provider_names()
        if len(set(names)) != len(names):
            raise ValueError(f"providers: every provider needs its own name (got {', '.join(names)})")
        object.__setattr__(self, "provider", self.providers[0])
        return self

    @property
    def chain(self) -> list[ProviderConfig]:
        """The providers a model call may be made on, the primary first."""
        return self.providers if self.providers is not None else [self.provider]

    def fallback_steps(self) -> list[tuple[str, str]]:
        """Every (from, to) a call may move along the chain (the metrics' label pairs)."""
        names = self.provider_names()
        return [(a, b) for i, a in enumerate(names) for b in names[i + 1 :]]

    def provider_names(self) -> list[str]:
        """Each provider's name in events and metric labels: its ``name``, else its position."""
        return [p.name or str(i) for i, p in enumerate(self.chain)]

    @model_validator(mode="after")
    def _a_cost_budget_on_a_priced_model(self) -> AgentProfile:
        """A cost budget cannot be kept on a model with no price: refused when loaded."""
        if self.budget.max_cost_usd is not None:
            for p in self.chain:  # a fallback answers at its own prices: each must have one
                if p.prices() is None:
                    raise ValueError(unpriced_message("budget.maxCostUsd", p))
        return self

    def unpriced(self) -> ProviderConfig | None:
        """The first provider of the chain with no price (its own or the table's), if any."""
        return next((p for p in self.chain if p.prices() is None), None)

    @model_validator(mode="after")
    def _cache_only_without_side_effects(self) -> AgentProfile:
        http = {t.name for t in self.http_tools}
        for name, ts in self.tool_settings.items():
            if ts.cache is None:
                continue
            if ts.side_effects:
                raise ValueError(f"toolSettings.{name}: a tool with sideEffects cannot have a cache")
            if (name in http or self.mcp_server_of(name) is not None) and ts.side_effects is not False:
                raise ValueError(
                    f"toolSettings.{name}: an HTTP or MCP tool is cached only if it declares sideEffects: false"
                )
        return self

    def cache_ttl_s(self, tool: str) -> int | None:
        """How long a result of ``tool`` may be reused, or None: not cached."""
        ts = self.tool_settings.get(tool)
        return ts.cache.ttl_s if ts is not None and ts.cache is not None else None

    def client_tool_problem(self, tools: list[ClientTool]) -> str | None:
        """Why a RunInput may not declare these client tools, or None."""
        internal = {"recall_tool_call", "load_older_history", "search_history"}
        taken = {*self.tool_names(), *(t.name for t in self.client_tools), *internal}
        seen: set[str] = set()
        for i, t in enumerate(tools):
            if t.name in taken or t.name in seen or self.mcp_server_of(t.name) is not None:
                return f"clientTools.{i}.name: {t.name!r} is already a tool of this run"
            if "*" not in self.run_client_tools and t.name not in self.run_client_tools:
                return (
                    f"clientTools.{i}.name: profile {self.name!r} does not allow a run to declare {t.name!r}"
                )
            seen.add(t.name)
        return None

    def tool_names(self) -> list[str]:
        return [*self.tools, *(t.name for t in self.http_tools), *(t.tool_name for t in self.agent_tools)]

    def settings_for(self, tool: str) -> ToolSettings:
        got = self.tool_settings.get(tool)
        if got is not None:
            return got
        server = self.mcp_server_of(tool)
        if server is not None and server.timeout_s != _DEFAULT_TOOL_SETTINGS.timeout_s:
            return ToolSettings(timeout_s=server.timeout_s)
        return _DEFAULT_TOOL_SETTINGS

    def mcp_server_of(self, tool: str) -> McpServerConfig | None:
        """The MCP server an exposed name ``<server>__<tool>`` belongs to, or None."""
        prefix, sep, rest = tool.partition(MCP_SEP)
        if not sep or not rest:
            return None
        return next((s for s in self.mcp_servers if s.name == prefix), None)

    @field_validator("mcp_servers")
    @classmethod
    def _unique_servers(cls, value: list[McpServerConfig]) -> list[McpServerConfig]:
        names = [s.name for s in value]
        if len(names) != len(set(names)):
            raise ValueError("mcpServers: every server needs its own name")
        return value

    def dev_only(self) -> str | None:
        """Why this profile is for development only, or None when it is fit for production."""
        if any(p.kind == "scripted" and p.mode == "script" for p in self.chain):
            return "its scripted model follows the caller's runtimeHints"
        dev = sorted(DEV_TOOLS.intersection(self.tools))
        return f"it offers the test tools {', '.join(dev)}" if dev else None


class ProfileFile(Model):
    profiles: list[AgentProfile]


BUILTIN_PROFILES: tuple[AgentProfile, ...] = (
    AgentProfile(
        name="default",
        provider=ProviderConfig(kind="scripted", mode="calculator"),
        system_prompt="You are a careful calculator agent. Use the calculator tool for arithmetic.",
        tools=["calculator"],
    ),
    AgentProfile(
        name="scripted",
        provider=ProviderConfig(kind="scripted", mode="script"),
        system_prompt="You follow the script in runtimeHints.",
        tools=["calculator", "echo", "sleep", "fail", "flaky"],
        tool_settings={
            "sleep": ToolSettings(timeout_s=limits.MAX_TOOL_TIMEOUT_S),
            "flaky": ToolSettings(retry_delay_ms=100),
        },
        loop_limits=LoopLimits(max_iterations=1_000),  # tests script long runs; a run may narrow it
    ),
)


def dev_profiles_enabled() -> bool:
    """AGENTMILL_DEV_PROFILES, read now (through Settings: one parsing rule for it)."""
    from shared.settings import Settings  # here: pydantic-settings imports asyncio; the machine must not

    return Settings().dev_profiles


def load_profiles(path: str | None, *, dev: bool | None = None) -> dict[str, AgentProfile]:
    """Built-ins, overridden and extended by the file at ``path`` when given.

    Without ``dev`` (default: AGENTMILL_DEV_PROFILES) the test-only built-in ``scripted`` is not
    loaded, and a file profile that is test-only is refused with an error naming it."""
    dev = dev_profiles_enabled() if dev is None else dev
    profiles = {p.name: p for p in BUILTIN_PROFILES if dev or p.dev_only() is None}
    if path:
        for p in _read(path):
            why = p.dev_only()
            if why and not dev:
                raise SettingsError(
                    f"{PROFILES_ENV}: profile {p.name!r} is for tests only ({why}); set "
                    f"{DEV_PROFILES_ENV}=true to load it"
                )
            profiles[p.name] = p
    return profiles


def _read(path: str) -> list[AgentProfile]:
    """The profiles of the file at ``path``; SettingsError (a line naming AGENTMILL_PROFILES, the
    profile and what is wrong) when it cannot be read or holds what a profile may not."""
    where = f"{PROFILES_ENV}={path}"
    try:
        data = orjson.loads(Path(path).read_bytes())
    except OSError as exc:
        raise SettingsError(f"{where}: cannot read it ({exc.strerror or exc})") from None
    except orjson.JSONDecodeError as exc:
        raise SettingsError(f"{where}: not JSON ({exc})") from None
    try:
        return ProfileFile.model_validate(data).profiles
    except ValidationError as exc:
        raise SettingsError(f"{where}: {describe_profile_errors(exc, data)}") from None


def profiles_from(path: str | None, *, dev: bool | None = None) -> dict[str, AgentProfile]:
    """``load_profiles``, cached per (path, dev); ``dev`` as there (processes pass their settings')."""
    return _cached_profiles(path, dev_profiles_enabled() if dev is None else dev)


@lru_cache(maxsize=8)
def _cached_profiles(path: str | None, dev: bool) -> dict[str, AgentProfile]:
    return load_profiles(path, dev=dev)
