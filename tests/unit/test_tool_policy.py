"""Which tools a run gets: allowList ∩ allowedTools, toolOrder, enabled — and a
run's toolPolicy can narrow its profile's, never widen it."""

from __future__ import annotations

from typing import Any

import pytest

from agentmill_client.models import RunInput, ToolPolicy
from shared.profiles import AgentProfile, ToolSettings
from shared.session_calls import CONTEXT_TOOLS
from worker.core.config import RunConfig, ToolSpec, resolve_config

TOOLS = ["calculator", "echo", "sleep", "fail"]
SPECS = {n: ToolSpec(name=n) for n in TOOLS}


def config(run: dict[str, Any], *, session: bool = False, **profile: Any) -> RunConfig:
    prof = AgentProfile(name="p", tools=TOOLS, **profile)
    body = RunInput.model_validate({"inputMessages": [{"role": "user", "content": "hi"}], **run})
    return resolve_config(prof, body, SPECS, has_session=session)


def names(cfg: RunConfig) -> list[str]:
    return [t.name for t in cfg.tools]


@pytest.mark.parametrize(
    ("run", "expected"),
    [
        ({}, TOOLS),
        ({"allowedTools": ["echo", "fail"]}, ["echo", "fail"]),
        ({"toolPolicy": {"allowList": ["sleep", "echo", "nope"]}}, ["echo", "sleep"]),
        ({"allowedTools": ["echo", "fail"], "toolPolicy": {"allowList": ["fail", "sleep"]}}, ["fail"]),
        ({"toolOrder": ["fail", "echo"]}, ["fail", "echo", "calculator", "sleep"]),
        ({"toolPolicy": {"enabled": False}}, []),
    ],
)
def test_allowed_tools_and_order(run: dict[str, Any], expected: list[str]) -> None:
    assert names(config(run)) == expected


def test_disabled_tools_also_withhold_recall() -> None:
    # a run with a session has the context tools by default: recall and the history tools
    assert {t.name for t in config({}, session=True).internal_tools} == CONTEXT_TOOLS
    assert config({"toolPolicy": {"enabled": False}}, session=True).internal_tools == []


def test_a_run_cannot_widen_its_profile() -> None:
    narrow = ToolPolicy(
        enabled=True,
        allow_list=["echo"],
        max_parallel=2,
        max_calls_per_run=5,
        require_approval_by_default=True,
    )
    greedy = {
        "toolPolicy": {
            "allowList": ["echo", "calculator", "sleep"],
            "maxParallel": 16,
            "maxCallsPerRun": 500,
            "requireApprovalByDefault": False,
        }
    }
    cfg = config(greedy, tool_policy=narrow)
    assert names(cfg) == ["echo"]
    assert cfg.max_parallel == 2 and cfg.max_calls_per_run == 5
    assert cfg.approval_tools == ["echo"]  # the profile's approval requirement stands
    off = config({"toolPolicy": {"enabled": True}}, tool_policy=ToolPolicy(enabled=False))
    assert names(off) == []


def test_a_run_can_narrow_its_profile() -> None:
    cfg = config(
        {"toolPolicy": {"maxParallel": 1, "maxCallsPerRun": 2, "requireApprovalByDefault": True}},
        tool_policy=ToolPolicy(max_parallel=4, max_calls_per_run=10),
    )
    assert cfg.max_parallel == 1 and cfg.max_calls_per_run == 2
    assert cfg.approval_tools == TOOLS


def test_a_run_cannot_raise_the_default_parallelism_its_profile_leaves_unset() -> None:
    """An unset profile maxParallel is the documented default (1), which a run may not exceed."""

    def parallel(run: int | None, profile: ToolPolicy) -> int:
        return config({"toolPolicy": {"maxParallel": run}}, tool_policy=profile).max_parallel

    assert config({}).max_parallel == 1
    assert parallel(64, ToolPolicy()) == 1
    assert parallel(64, ToolPolicy(enabled=True)) == 1
    assert parallel(64, ToolPolicy(max_parallel=8)) == 8
    assert parallel(3, ToolPolicy(max_parallel=8)) == 3
    assert parallel(None, ToolPolicy(max_parallel=8)) == 8


def test_approval_per_tool_from_the_profile() -> None:
    cfg = config({}, tool_settings={"sleep": ToolSettings(requires_approval=True)})
    assert cfg.approval_tools == ["sleep"]
