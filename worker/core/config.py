"""The resolved configuration of one run: a profile merged with its RunInput, frozen at start.

It is part of the checkpoint, so a run resumes with the settings it started with even if the
profile file changed meanwhile.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from agentmill_client.models import Budget, LoopLimits, Model, ResponseFormat, RunInput
from shared.profiles import (
    DEFAULT_MAX_DEPTH,
    AgentProfile,
    CompactionConfig,
    ContextConfig,
    Pricing,
    RetryConfig,
)
from shared.session_calls import RECALL_TOOL
from worker.core import history_tools, policy, preamble, prompt

__all__ = [
    "DEFAULT_MAX_DEPTH",
    "DEFAULT_MAX_ITERATIONS",
    "DEFAULT_MAX_REPAIRS",
    "DEFAULT_MAX_TOOL_CALLS",
    "DEFAULT_RESERVE_OUTPUT_TOKENS",
    "LOAD_OLDER_SPEC",
    "MAX_RECALL_IDS",
    "RECALL_PROMPT",
    "RECALL_SPEC",
    "RECALL_TOOL",
    "SEARCH_SPEC",
    "ChainLink",
    "Lineage",
    "RunConfig",
    "ToolSpec",
    "chain_of",
    "narrow_budget",
    "narrow_limits",
    "resolve_config",
]


DEFAULT_MAX_ITERATIONS = 25
DEFAULT_MAX_REPAIRS = 2  # repair turns of a structured answer that does not validate
DEFAULT_MAX_TOOL_CALLS = 100  # tool calls a run executes before it is asked for its answer
# A call's worst-case reply when its model sets no maxTokens: what a budget reserves for it.
DEFAULT_RESERVE_OUTPUT_TOKENS = 4096


class ToolSpec(Model):
    """What the model is told about a tool. ``listing``: an MCP tool's, the content hash of its
    server's listing; a run's stored configuration keeps such a tool as its name and that hash, and
    the schema is filled back from the listing, kept once (worker/tools/mcp_listings.py)."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object"})
    listing: str | None = None


MAX_RECALL_IDS = 10  # ids one recall_tool_call may ask for
RECALL_SPEC = ToolSpec(
    name=RECALL_TOOL,
    description=(
        "Recall the full result of earlier tool calls of this run or session by their toolCallIds. "
        "Results of past turns and of compacted messages are left out of the conversation; their ids "
        "are shown where the calls are mentioned. Use this when you need one again."
    ),
    parameters={
        "type": "object",
        "properties": {
            "callId": {"type": "string", "description": "the toolCallId to recall"},
            "callIds": {"type": "array", "items": {"type": "string"}, "maxItems": MAX_RECALL_IDS,
                        "description": "several toolCallIds to recall at once"},
        },
    },
)  # fmt: skip
LOAD_OLDER_SPEC = ToolSpec(
    name=history_tools.LOAD_OLDER_HISTORY,
    description=history_tools.LOAD_OLDER_DESCRIPTION,
    parameters=history_tools.LOAD_OLDER_PARAMETERS,
)
SEARCH_SPEC = ToolSpec(
    name=history_tools.SEARCH_HISTORY,
    description=history_tools.SEARCH_DESCRIPTION,
    parameters=history_tools.SEARCH_PARAMETERS,
)


RECALL_PROMPT = (
    "Earlier tool results may be left out of this conversation (past turns, compacted messages); "
    "their toolCallIds are shown where the calls are mentioned. To read one again, call "
    f"{RECALL_TOOL} with its callId."
)


class ChainLink(Model):
    """A provider of a fallback chain as the machine sees it: its name (events, metric labels), its
    model, its declared context window, and what a call on it reserves (maxTokens, pricing)."""

    name: str
    model: str
    context_window: int | None = None
    reserve_output_tokens: int = DEFAULT_RESERVE_OUTPUT_TOKENS
    pricing: Pricing | None = None


def chain_of(profile: AgentProfile) -> list[ChainLink]:
    """The profile's fallback chain (empty for a profile with one provider: the run's pricing and
    reserve are the primary's then)."""
    if profile.providers is None or len(profile.providers) < 2:
        return []
    return [
        ChainLink(
            name=name,
            model=p.model_name,
            context_window=p.context_window,
            reserve_output_tokens=p.max_tokens or DEFAULT_RESERVE_OUTPUT_TOKENS,
            pricing=p.prices(),  # its own, else the table's
        )
        for name, p in zip(profile.provider_names(), profile.providers, strict=True)
    ]


class Lineage(Model):
    """Where a run stands among sub-agents: its ancestors' agents (the root's first) and the depth
    limit its root set (loopLimits.maxDepth, narrowed on the way down). A root run has none."""

    agents: list[str] = Field(default_factory=list)
    max_depth: int = DEFAULT_MAX_DEPTH
    root: str = ""  # the root run's id (its tree's caps: shared/children.py); '' = written before it was kept


class RunConfig(Model):
    agent: str
    agent_version: int | None = None  # the version of the tenant's agent it runs (None: a file profile)
    system_prompt: str
    tools: list[ToolSpec] = Field(default_factory=list)  # external tools offered, in order
    internal_tools: list[ToolSpec] = Field(default_factory=list)  # injected, never recorded as history
    approval_tools: list[str] = Field(default_factory=list)
    max_parallel: int = 1
    max_calls_per_run: int | None = None
    max_iterations: int = DEFAULT_MAX_ITERATIONS
    max_tool_rounds: int | None = None
    max_tool_calls: int = DEFAULT_MAX_TOOL_CALLS
    max_run_duration_ms: int | None = None
    approval_timeout_ms: int | None = None
    retry: RetryConfig = Field(default_factory=RetryConfig)
    context: ContextConfig = Field(default_factory=ContextConfig)
    compaction: CompactionConfig = Field(default_factory=CompactionConfig)
    on_limit: Literal["answer", "fail"] = "answer"
    runtime_init_data: dict[str, Any] = Field(default_factory=dict)  # handed to every tool's context
    client_tools: list[str] = Field(default_factory=list)  # names executed by the caller
    client_tool_timeout_ms: int = 600_000
    response_format: ResponseFormat | None = None  # the final answer must be JSON (validated)
    max_repairs: int = DEFAULT_MAX_REPAIRS
    include_messages: bool = False  # the final transcript in result.messages
    agent_tools: dict[str, str] = Field(default_factory=dict)  # sub-agent tool name -> child's profile
    ancestors: list[str] = Field(default_factory=list)  # the agents above this run, the root's first
    max_depth: int = DEFAULT_MAX_DEPTH  # a child may be at most this deep (the root is at 0)
    root: str = ""  # the root run's id, '' for a root run (whose own id it is)
    budget: Budget | None = None  # the run's budget, narrowed by its profile's (None: none)
    reserve_output_tokens: int = DEFAULT_RESERVE_OUTPUT_TOKENS  # a call's worst-case reply (maxTokens)
    pricing: Pricing | None = None  # the model's prices (its own, else the table's), for a call's worst case
    # The system prompt's preamble (also at the head of system_prompt); while one is on, tool
    # results reach the model framed as data (worker/core/preamble.py). None: off.
    preamble: str | None = None
    # A fallback chain (the primary first; empty: one provider) and the failure classes that move a
    # call along it (worker/machine/fallback.py).
    chain: list[ChainLink] = Field(default_factory=list)
    fallback_on: list[str] = Field(default_factory=list)
    # The economy lane (worker/economy/): its model calls go to the provider's batch endpoint until
    # ``economy_deadline_ms`` (absolute; None: ``economy_default_ms`` after the run's start) less
    # ``economy_reserve_ms``, the standard lane's expected time.
    lane: Literal["standard", "economy"] = "standard"
    economy_deadline_ms: int | None = None
    economy_default_ms: int = 24 * 3_600_000
    economy_reserve_ms: int = 600_000
    economy_links: list[int] = Field(default_factory=list)  # the chain's places the economy lane may use

    def switch_at_ms(self, started_at_ms: int) -> int:
        """When an economy call still waiting in a batch goes to the standard lane."""
        deadline = self.economy_deadline_ms or started_at_ms + self.economy_default_ms
        return deadline - self.economy_reserve_ms

    def link_pricing(self, index: int) -> Pricing | None:
        """The prices of the provider a call is on (``pricing`` for the primary or a lone one); an
        economy run's call on a provider the lane may use: at the batch price."""
        p = self.chain[index].pricing if index and index < len(self.chain) else self.pricing
        if p is not None and self.lane == "economy" and index in self.economy_links:
            return p.at_batch()
        return p

    def link_reserve(self, index: int) -> int:
        """What a call on that provider reserves for its reply (its maxTokens, else the default)."""
        return (
            self.chain[index].reserve_output_tokens
            if index and index < len(self.chain)
            else self.reserve_output_tokens
        )

    store_content: bool = True  # False: the run keeps no content once it ends, nor do its children

    def internal_names(self) -> set[str]:
        return {t.name for t in self.internal_tools}

    def tool_names(self) -> set[str]:
        return {t.name for t in self.tools} | {t.name for t in self.internal_tools}


def _narrowest(*values: int | None) -> int | None:
    given = [v for v in values if v is not None]
    return min(given) if given else None


def narrow_limits(
    profile: LoopLimits, run: LoopLimits | None, *, duration_default_ms: int, duration_max_ms: int
) -> LoopLimits:
    """Every field is the smaller of the run's and the profile's: a caller can only narrow them.
    The run's duration is also capped by the deployment's maximum and defaults to its default."""
    run = run or LoopLimits()
    duration = _narrowest(profile.max_run_duration_ms, run.max_run_duration_ms)
    return LoopLimits(
        max_iterations=_narrowest(profile.max_iterations or DEFAULT_MAX_ITERATIONS, run.max_iterations),
        max_tool_rounds=_narrowest(profile.max_tool_rounds, run.max_tool_rounds),
        max_run_duration_ms=min(duration or duration_default_ms, duration_max_ms),
        max_repairs=_narrowest(
            DEFAULT_MAX_REPAIRS if profile.max_repairs is None else profile.max_repairs, run.max_repairs
        ),
        max_tool_calls=_narrowest(
            DEFAULT_MAX_TOOL_CALLS if profile.max_tool_calls is None else profile.max_tool_calls,
            run.max_tool_calls,
        ),
    )


def narrow_budget(profile: Budget, run: Budget | None) -> Budget | None:
    """The smaller of the run's and the profile's for each field: a caller can only narrow a budget."""
    run = run or Budget()
    tokens = _narrowest(profile.max_tokens, run.max_tokens)
    given = [c for c in (profile.max_cost_usd, run.max_cost_usd) if c is not None]
    cost = min(given) if given else None
    return None if tokens is None and cost is None else Budget(max_tokens=tokens, max_cost_usd=cost)


def _max_depth(profile: AgentProfile, run: RunInput, lineage: Lineage | None) -> int:
    """The depth limit: a root run's (its profile's, else the default, narrowed by the run), which
    binds its whole tree; a child's profile may only narrow it further. A run's value never raises
    the limit: above its profile's (or the default) it is lowered to it."""
    asked = (run.loop_limits or LoopLimits()).max_depth
    if lineage is None:
        ceiling = (
            DEFAULT_MAX_DEPTH if profile.loop_limits.max_depth is None else profile.loop_limits.max_depth
        )
        return ceiling if asked is None else min(asked, ceiling)
    own = _narrowest(profile.loop_limits.max_depth, asked)
    return lineage.max_depth if own is None else min(own, lineage.max_depth)


def resolve_config(
    profile: AgentProfile,
    run: RunInput,
    specs: dict[str, ToolSpec],
    *,
    has_session: bool,
    duration_default_ms: int = 3_600_000,
    duration_max_ms: int = 24 * 3_600_000,
    lineage: Lineage | None = None,
) -> RunConfig:
    """Merge profile defaults with the run's overrides (the run can narrow its tools and limits,
    never widen them)."""
    tp = policy.narrow_tool_policy(profile.tool_policy, run.tool_policy)
    ll = narrow_limits(
        profile.loop_limits,
        run.loop_limits,
        duration_default_ms=duration_default_ms,
        duration_max_ms=duration_max_ms,
    )
    run_client = run.client_tools or []
    if run_client and (problem := profile.client_tool_problem(run_client)) is not None:
        raise ValueError(problem)
    client = [*profile.client_tools, *run_client]
    specs = {**specs, **{t.name: ToolSpec(name=t.name, description=t.description, parameters=t.parameters)
                         for t in client}}  # fmt: skip
    for a in profile.agent_tools:  # sub-agents: run by a child run, not by a tool of this worker
        about = a.description or f"Hand a task to the {a.agent} agent; its answer is the result."
        specs[a.tool_name] = ToolSpec(name=a.tool_name, description=about, parameters=a.parameters)
    names = policy.allowed_tools(
        [*profile.tool_names(), *(n for n in specs if profile.mcp_server_of(n)), *(t.name for t in client)],
        enabled=tp.enabled,
        allow_list=tp.allow_list,
        allowed=run.allowed_tools,
        order=run.tool_order,
    )
    tools = [specs[n] for n in names if n in specs]
    approval = [
        t.name
        for t in tools
        if tp.require_approval_by_default or profile.settings_for(t.name).requires_approval
    ]
    # Recall is offered when there is something to recall: a session's past runs or this run's tools.
    internal = [RECALL_SPEC] if (has_session or tools) and tp.enabled is not False else []
    # The context tools: unless the profile says otherwise, offered to a run with a session.
    wanted = profile.context.history_tools
    if internal and (has_session if wanted is None else wanted):
        internal += [LOAD_OLDER_SPEC, SEARCH_SPEC] if has_session else [SEARCH_SPEC]
    system_prompt = prompt.render(
        run.system_prompt_override or profile.system_prompt,
        run.runtime_init_data,
        {"runId": run.run_id or "", "sessionId": run.session_id or "", "agent": profile.name},
    )
    if internal:
        system_prompt += "\n\n" + RECALL_PROMPT
    if len(internal) > 1:
        system_prompt += " " + history_tools.HISTORY_PROMPT
    rules = {"v1": preamble.PREAMBLE_V1, "custom": profile.preamble_text, "off": None}[profile.preamble]
    compaction = profile.compaction
    if run.compact_threshold is not None and run.compact_threshold < compaction.max_messages:
        compaction = compaction.model_copy(update={"max_messages": run.compact_threshold})
    return RunConfig(
        agent=profile.name,
        agent_version=run.agent_version,
        system_prompt=preamble.with_preamble(rules, system_prompt),
        tools=tools,
        internal_tools=internal,
        approval_tools=approval,
        max_parallel=tp.max_parallel or policy.DEFAULT_MAX_PARALLEL,
        max_calls_per_run=tp.max_calls_per_run,
        max_iterations=ll.max_iterations or DEFAULT_MAX_ITERATIONS,
        max_tool_rounds=ll.max_tool_rounds,
        max_tool_calls=DEFAULT_MAX_TOOL_CALLS if ll.max_tool_calls is None else ll.max_tool_calls,
        max_run_duration_ms=ll.max_run_duration_ms,
        approval_timeout_ms=tp.approval_timeout_ms,
        retry=profile.retry,
        context=profile.context.model_copy(update={"history_tools": len(internal) > 1}),
        compaction=compaction,
        on_limit=profile.on_limit,
        runtime_init_data=dict(run.runtime_init_data or {}),
        client_tools=[t.name for t in client if t.name in names],
        client_tool_timeout_ms=profile.client_tool_timeout_ms,
        response_format=run.response_format,
        max_repairs=DEFAULT_MAX_REPAIRS if ll.max_repairs is None else ll.max_repairs,
        include_messages=bool(run.include_messages),
        agent_tools={t.tool_name: t.agent for t in profile.agent_tools if t.tool_name in names},
        ancestors=list(lineage.agents) if lineage else [],
        root=lineage.root if lineage else "",
        max_depth=_max_depth(profile, run, lineage),
        budget=narrow_budget(profile.budget, run.budget),
        reserve_output_tokens=profile.provider.max_tokens or DEFAULT_RESERVE_OUTPUT_TOKENS,
        pricing=profile.provider.prices(),
        preamble=rules,
        chain=chain_of(profile),
        fallback_on=list(profile.fallback_on) if profile.providers and len(profile.providers) > 1 else [],
        lane="economy" if run.lane == "economy" and profile.economy.enabled else "standard",
        economy_deadline_ms=run.deadline,
        economy_default_ms=profile.economy.deadline_ms,
        economy_reserve_ms=profile.economy.standard_time_ms,
        economy_links=[
            i
            for i, (name, p) in enumerate(zip(profile.provider_names(), profile.chain, strict=True))
            if profile.economy.allows(name, p.kind)
        ],
        store_content=profile.store_content if run.store_content is None else run.store_content,
    )
