"""The resolved configuration of one run: a profile merged with its RunInput, frozen at start.

It is part of the checkpoint, so a run resumes with the settings it started with even if the
profile file changed meanwhile.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from shared.models import Model, RunInput
from shared.profiles import AgentProfile, CompactionConfig, ContextConfig, RetryConfig
from worker import policy

DEFAULT_MAX_ITERATIONS = 25  # seed 004
RECALL_TOOL = "recall_tool_call"


class ToolSpec(Model):
    """What the model is told about a tool."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object"})


RECALL_SPEC = ToolSpec(
    name=RECALL_TOOL,
    description=(
        "Recall the full result of an earlier tool call of this session by its id. Results of past "
        "turns are left out of the conversation; use this when you need one again."
    ),
    parameters={
        "type": "object",
        "properties": {"callId": {"type": "string", "description": "the toolCallId to recall"}},
        "required": ["callId"],
    },
)


class RunConfig(Model):
    agent: str
    system_prompt: str
    tools: list[ToolSpec] = Field(default_factory=list)  # external tools offered, in order
    internal_tools: list[ToolSpec] = Field(default_factory=list)  # injected, never recorded as history
    approval_tools: list[str] = Field(default_factory=list)
    max_parallel: int = 1
    max_calls_per_run: int | None = None
    max_iterations: int = DEFAULT_MAX_ITERATIONS
    max_tool_rounds: int | None = None
    max_run_duration_ms: int | None = None
    approval_timeout_ms: int | None = None
    retry: RetryConfig = Field(default_factory=RetryConfig)
    context: ContextConfig = Field(default_factory=ContextConfig)
    compaction: CompactionConfig = Field(default_factory=CompactionConfig)

    def tool_names(self) -> set[str]:
        return {t.name for t in self.tools} | {t.name for t in self.internal_tools}


def resolve_config(
    profile: AgentProfile, run: RunInput, specs: dict[str, ToolSpec], *, has_session: bool
) -> RunConfig:
    """Merge profile defaults with the run's overrides (the run can narrow its tools, never widen them)."""
    tp = policy.narrow_tool_policy(profile.tool_policy, run.tool_policy)
    ll = (
        profile.loop_limits.model_copy(update=run.loop_limits.model_dump(exclude_none=True))
        if run.loop_limits
        else profile.loop_limits
    )
    names = policy.allowed_tools(
        profile.tool_names(),
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
    internal = [RECALL_SPEC] if has_session and tp.enabled is not False else []
    return RunConfig(
        agent=profile.name,
        system_prompt=run.system_prompt_override or profile.system_prompt,
        tools=tools,
        internal_tools=internal,
        approval_tools=approval,
        max_parallel=tp.max_parallel or 1,
        max_calls_per_run=tp.max_calls_per_run,
        max_iterations=ll.max_iterations or DEFAULT_MAX_ITERATIONS,
        max_tool_rounds=ll.max_tool_rounds,
        max_run_duration_ms=ll.max_run_duration_ms,
        approval_timeout_ms=tp.approval_timeout_ms,
        retry=profile.retry,
        context=profile.context,
        compaction=profile.compaction,
    )
