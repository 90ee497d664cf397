"""Which tools are declared without side effects when a profile says nothing
(worker/tools/declared.py): calculator, echo and the read-only context tools; the profile's own
``toolSettings.<tool>.sideEffects`` wins either way. The hold it allows: tests/unit/test_step_hold.py."""

from __future__ import annotations

from typing import Any

import pytest

from shared.profiles import AgentProfile, ToolSettings
from worker.tools.builtin import BUILTINS
from worker.tools.declared import declared_settings


def profile(**kw: Any) -> AgentProfile:
    return AgentProfile.model_validate({"name": "t", "tools": sorted(BUILTINS), **kw})


def side_effects(p: AgentProfile, name: str) -> bool | None:
    return declared_settings(p, name).side_effects


@pytest.mark.parametrize(
    ("tool", "expected"),
    [
        ("calculator", False),
        ("echo", False),
        ("recall_tool_call", False),
        ("search_history", False),
        ("sleep", None),  # stands for a slow tool whose call is claimed before it runs
        ("fail", None),
        ("flaky", None),
    ],
)
def test_the_defaults_of_a_profile_without_tool_settings(tool: str, expected: bool | None) -> None:
    assert side_effects(profile(), tool) is expected


def test_the_profile_declaration_wins_and_other_settings_keep_the_default() -> None:
    p = profile(
        toolSettings={
            "echo": {"sideEffects": True},
            "recall_tool_call": {"sideEffects": True},
            "calculator": {"timeoutS": 5},
            "sleep": {"sideEffects": False},
        }
    )
    assert side_effects(p, "echo") is True
    assert side_effects(p, "recall_tool_call") is True
    assert declared_settings(p, "calculator") == ToolSettings(timeout_s=5, side_effects=False)
    assert side_effects(p, "sleep") is False


def test_tools_of_unknown_effects_stay_undeclared() -> None:
    p = profile(
        tools=["calculator"],
        httpTools=[{"name": "crm", "url": "http://crm.invalid/"}],
        mcpServers=[{"name": "docs", "url": "http://docs.invalid/mcp"}],
        agentTools=[{"agent": "helper"}],
        clientTools=[{"name": "pick", "description": "the caller picks"}],
    )
    for name in ("crm", "docs__search", "helper", "pick", "echo"):  # echo: not this profile's
        assert side_effects(p, name) is None, name


def test_an_http_tool_named_as_a_built_in_is_not_the_built_in() -> None:
    p = profile(httpTools=[{"name": "echo", "url": "http://echo.invalid/"}])
    assert side_effects(p, "echo") is None
    assert side_effects(p, "calculator") is False
