"""Whether a tool is declared without side effects, which lets a step hold the model's reply until
the call's result goes out with it (worker/runner/holding.py).

A profile's ``toolSettings.<tool>.sideEffects`` decides when it is set, either way. Otherwise the
tool's own declaration does: a built-in's ``side_effects`` (worker/tools/builtin.py), and the
context tools that only read the run's session (recall_tool_call, search_history). A lost worker
may then have run such a call once already; running it again changes nothing. load_older_history
needs no declaration: the machine answers it, with no call to hold. HTTP, MCP, client and agent
tools have effects nobody here knows: they stay undeclared unless their profile declares them."""

from __future__ import annotations

from shared.profiles import AgentProfile, ToolSettings
from shared.session_calls import RECALL_TOOL, SEARCH_HISTORY
from worker.tools.builtin import BUILTINS

__all__ = ["READ_ONLY_CONTEXT_TOOLS", "declared_settings", "side_effect_free"]

READ_ONLY_CONTEXT_TOOLS = frozenset({RECALL_TOOL, SEARCH_HISTORY})
_PURE = ToolSettings(side_effects=False)  # frozen: one instance serves every such tool without settings


def side_effect_free(profile: AgentProfile, name: str) -> bool:
    """The tool's own declaration, as ``profile`` offers it: a built-in the profile lists (and no
    HTTP tool of the same name replaces), or a read-only context tool."""
    if name in READ_ONLY_CONTEXT_TOOLS:
        return True
    tool = BUILTINS.get(name)
    return (
        tool is not None
        and tool.side_effects is False
        and name in profile.tools
        and all(t.name != name for t in profile.http_tools)
    )


def declared_settings(profile: AgentProfile, name: str) -> ToolSettings:
    """``profile.settings_for(name)``, its ``side_effects`` filled in from the tool's own
    declaration when the profile does not set it."""
    got = profile.settings_for(name)
    if got.side_effects is not None or not side_effect_free(profile, name):
        return got
    return _PURE if name not in profile.tool_settings else got.model_copy(update={"side_effects": False})
