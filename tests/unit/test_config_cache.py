"""Resolved configurations shared by the runs of a profile that set no knob of their own
(worker/core/config_cache.py): the same configuration as resolving it afresh, never shared where a run's
own input or a changed profile or tool list would make it differ, and never a channel between runs."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from agentmill_client.models import RunInput, ToolCall, ToolResult
from shared.profiles import AgentProfile
from worker.adapters.memory_store import (
    MemoryHost,
    MemoryModels,
    MemoryRun,
    MemoryRunStore,
    MemorySessionStore,
    MemoryTools,
)
from worker.core import preamble
from worker.core.config import RunConfig, ToolSpec, resolve_config
from worker.core.config_cache import ConfigCache
from worker.models.scripted import ScriptedProvider
from worker.runner import RunDriver, RunPorts
from worker.tools.base import ToolContext

PROFILE = AgentProfile(
    name="p", tools=["echo"], system_prompt="You help ({{agent}}).", run_client_tools=["*"]
)
SPECS = {"echo": ToolSpec(name="echo", description="echo", parameters={"type": "object"})}


def run(**extra: Any) -> RunInput:
    return RunInput.model_validate(
        {"agent": "p", "inputMessages": [{"role": "user", "content": "x"}], **extra}
    )


def resolved(cache: ConfigCache, r: RunInput, profile: AgentProfile = PROFILE, specs: Any = SPECS,
             lineage: bytes = b"", has_session: bool = False) -> RunConfig:  # fmt: skip
    return cache.get_or_resolve(
        profile, specs, r, has_session=has_session, lineage=lineage,
        resolve=lambda: resolve_config(profile, r, specs, has_session=has_session),
    )  # fmt: skip


def test_runs_without_knobs_share_one_configuration_equal_to_a_fresh_one() -> None:
    cache = ConfigCache()
    a, b = resolved(cache, run(runId="r1")), resolved(cache, run(runId="r2", metadata={"k": 1}))
    assert a is b and (cache.hits, cache.misses) == (1, 1)
    assert a == resolve_config(PROFILE, run(runId="r2"), SPECS, has_session=False)


@pytest.mark.parametrize(
    "knob",
    [
        {"systemPromptOverride": "other"},
        {"allowedTools": []},
        {"toolOrder": ["echo"]},
        {"toolPolicy": {"maxParallel": 1}},
        {"loopLimits": {"maxIterations": 2}},
        {"budget": {"maxTokens": 100}},
        {"runtimeInitData": {"name": "Ada"}},
        {"clientTools": [{"name": "ask", "parameters": {"type": "object"}}]},
        {"responseFormat": {"type": "json_object"}},
        {"includeMessages": True},
        {"lane": "economy"},
        {"deadline": 1},
    ],
)
def test_a_run_with_a_knob_of_its_own_gets_its_own_configuration(knob: dict[str, Any]) -> None:
    cache = ConfigCache()
    shared = resolved(cache, run())
    own = resolved(cache, run(**knob))
    assert own is not shared and own == resolve_config(PROFILE, run(**knob), SPECS, has_session=False)
    assert cache.hits == 0


def test_a_prompt_naming_the_run_or_session_is_never_shared() -> None:
    cache = ConfigCache()
    p = AgentProfile(name="p", system_prompt="Run {{ runId }}, session {{sessionId}}.")
    one, two = resolved(cache, run(runId="r1"), p), resolved(cache, run(runId="r2"), p)
    own = len(preamble.PREAMBLE_V1) + 2  # the agent's prompt follows the preamble
    assert one.system_prompt[own:].startswith("Run r1,") and two.system_prompt[own:].startswith("Run r2,")


def test_session_ancestry_profile_and_tool_list_each_key_the_configuration() -> None:
    cache = ConfigCache()
    base = resolved(cache, run())
    assert resolved(cache, run(), has_session=True) is not base  # recall offered with a session
    assert resolved(cache, run(), lineage=b'{"agents":["root"],"maxDepth":3}') is not base
    reloaded = PROFILE.model_copy(update={"system_prompt": "Changed."})
    assert "\n\nChanged." in resolved(cache, run(), reloaded).system_prompt
    relisted = {**SPECS, "more": ToolSpec(name="more", description="", parameters={"type": "object"})}
    assert resolved(cache, run(), specs=relisted) is not base  # an MCP server's new tool list
    assert resolved(cache, run()) is base


def test_the_cache_is_bounded_least_recently_used_first() -> None:
    cache = ConfigCache(max_entries=3)
    profiles = [AgentProfile(name=f"p{i}") for i in range(5)]
    first = resolved(cache, run(), profiles[0])
    for p in profiles[1:3]:
        resolved(cache, run(), p)
    assert resolved(cache, run(), profiles[0]) is first  # used again: kept when the next comes
    for p in profiles[3:]:
        resolved(cache, run(), p)
    assert len(cache) == 3 and resolved(cache, run(), profiles[0]) is first


class Meddling(MemoryTools):
    """A tool that writes into the runtime data its context hands it."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[dict[str, Any]] = []

    async def execute(
        self, profile: AgentProfile, call: ToolCall, ctx: ToolContext, on_retry: Any = None
    ) -> ToolResult:
        self.seen.append(dict(ctx.init_data))
        ctx.init_data["leaked"] = call.id  # type: ignore[index]
        return ToolResult(tool_call_id=call.id, name=call.name, content="ok")


async def test_a_tool_cannot_change_the_shared_configuration_of_the_next_run() -> None:
    host = MemoryHost({"p": PROFILE})
    sessions = MemorySessionStore()
    tools = Meddling()
    for n in (1, 2):
        r = run(runId=f"r{n}", runtimeHints={"script": [{"toolCalls": [{"name": "echo"}]}, {"text": "done"}]})
        mem = sessions.runs[f"r{n}"] = MemoryRun.submitted(f"r{n}", r)
        ports = RunPorts(MemoryRunStore(mem, sessions), sessions, MemoryModels(lambda p: ScriptedProvider(p.provider)),
                         tools)  # fmt: skip
        assert await RunDriver(host, ports, f"r{n}", gen=1).run() == "completed"
    assert host.configs.hits == 1  # the second run used the first one's configuration
    assert tools.seen == [{}, {}]  # and its tool saw none of what the first run's tool wrote


def test_a_shared_configuration_is_serialised_once_and_kept_while_runs_use_it() -> None:
    from worker.runner import commits

    cache = ConfigCache()
    shared = resolved(cache, run())
    first = commits.config_json(shared)
    assert orjson.loads(first) == shared.model_dump(mode="json", by_alias=True)
    for i in range(commits._SHARED_MAX * 2):  # runs with configurations of their own pass through
        commits.config_json(resolved(cache, run(loopLimits={"maxIterations": 1 + i % 50})))
        if i % 100 == 0:
            assert commits.config_json(shared) is first  # used meanwhile: still kept
    assert len(commits._shared) <= commits._SHARED_MAX
