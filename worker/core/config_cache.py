"""Resolved run configurations shared by the runs that would resolve the same one.

Most runs of a pool set none of the input's per-run knobs (tool policy, loop limits, budget,
allowed tools, client tools, responseFormat, runtimeInitData, the economy lane, a system prompt of their own): every
such run of one profile, at one depth of sub-agents, gets the same ``RunConfig``. Resolving it took
about 8 % of a one-step run's worker CPU; this keeps one per (profile, tool list, session or not,
ancestry) instead, at most ``MAX_ENTRIES``, least recently used dropped first.

``RunConfig`` is a frozen model, so a run cannot rebind its fields; its containers are handed on as
copies where a tool could change them (worker/runner/tool_call.py passes ``runtime_init_data`` as a
new dict). A profile replaced by a reload, or an MCP server whose tool list changed (a new specs
dict), misses the cache: an entry holds the very objects it was resolved from and is used only
when they are the ones given again.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import NamedTuple

from agentmill_client.models import RunInput
from shared.profiles import AgentProfile
from worker.core import prompt
from worker.core.config import RunConfig, ToolSpec

__all__ = ["MAX_ENTRIES", "ConfigCache", "shareable"]

MAX_ENTRIES = 256


class _Entry(NamedTuple):
    profile: AgentProfile
    specs: dict[str, ToolSpec]
    config: RunConfig


def shareable(run: RunInput, template: str) -> bool:
    """Whether the run's configuration depends on nothing of its own but its profile: no per-run
    knob is set and the system prompt names neither the run nor its session."""
    return (
        run.system_prompt_override is None
        and run.allowed_tools is None
        and run.tool_order is None
        and run.tool_policy is None
        and run.loop_limits is None
        and run.compact_threshold is None
        and run.budget is None
        and not run.runtime_init_data
        and not run.client_tools
        and run.response_format is None
        and not run.include_messages
        and run.lane in (None, "standard")
        and run.deadline is None
        and not prompt.names_the_run(template)
    )


class ConfigCache:
    """One worker's shared configurations (see the module's docstring)."""

    def __init__(self, max_entries: int = MAX_ENTRIES) -> None:
        self._entries: OrderedDict[tuple[str, int, int, bool, bytes], _Entry] = OrderedDict()
        self._max = max_entries
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    def get_or_resolve(
        self,
        profile: AgentProfile,
        specs: dict[str, ToolSpec],
        run: RunInput,
        *,
        has_session: bool,
        lineage: bytes,
        resolve: Callable[[], RunConfig],
    ) -> RunConfig:
        """The shared configuration when the run can share one, else ``resolve()``'s."""
        if not shareable(run, profile.system_prompt):
            return resolve()
        key = (profile.name, id(profile), id(specs), has_session, lineage)
        hit = self._entries.get(key)
        if hit is not None and hit.profile is profile and hit.specs is specs:
            self._entries.move_to_end(key)
            self.hits += 1
            return hit.config
        self.misses += 1
        config = resolve()
        self._entries[key] = _Entry(profile, specs, config)
        self._entries.move_to_end(key)
        while len(self._entries) > self._max:
            self._entries.popitem(last=False)
        return config
