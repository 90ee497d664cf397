"""The tool-result cache's rules: opt-in per tool, never with side effects, HTTP tools
only when declared; keyed by tenant, tool and canonical arguments; errors never kept."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from agentmill_client.models import ToolCall, ToolResult
from shared.profiles import AgentProfile
from worker.adapters.tool_cache import MemoryToolCache, cache_digest


def profile(**settings: object) -> AgentProfile:
    return AgentProfile.model_validate({
        "name": "p", "tools": ["echo"], "toolSettings": settings,
        "httpTools": [{"name": "crm", "url": "https://crm.example/x"}],
        "mcpServers": [{"name": "docs", "url": "https://mcp.example/mcp"}],
    })  # fmt: skip


def test_a_cache_is_opt_in_and_refused_with_side_effects() -> None:
    assert profile().cache_ttl_s("echo") is None
    assert profile(echo={"cache": {"ttlS": 30}}).cache_ttl_s("echo") == 30
    with pytest.raises(ValidationError, match="sideEffects cannot have a cache"):
        profile(echo={"cache": {"ttlS": 30}, "sideEffects": True})
    with pytest.raises(ValidationError, match="only if it declares sideEffects: false"):
        profile(crm={"cache": {"ttlS": 30}})
    assert profile(crm={"cache": {"ttlS": 30}, "sideEffects": False}).cache_ttl_s("crm") == 30
    with pytest.raises(ValidationError, match="only if it declares sideEffects: false"):
        profile(docs__search={"cache": {"ttlS": 30}})
    assert profile(docs__search={"cache": {"ttlS": 9}, "sideEffects": False}).cache_ttl_s("docs__search") == 9


def test_the_key_is_the_tenant_the_tool_and_the_canonical_arguments() -> None:
    a = ToolCall(id="c1.0", name="echo", arguments='{"text": "x", "n": 1}')
    b = ToolCall(id="c9.3", name="echo", arguments='{"n":1,"text":"x"}')
    assert cache_digest("t", a) == cache_digest("t", b)
    assert cache_digest("t", a) != cache_digest("u", a)
    assert cache_digest("t", a) != cache_digest("t", b.model_copy(update={"name": "calc"}))
    assert cache_digest("t", a) != cache_digest(
        "t", a.model_copy(update={"arguments": '{"text": "y", "n": 1}'})
    )


class Clock:
    t = 1_000_000

    def now_ms(self) -> int:
        return self.t

    def monotonic(self) -> float:
        return self.t / 1000


async def test_a_hit_is_this_calls_result_marked_cached_until_its_ttl() -> None:
    clock = Clock()
    cache = MemoryToolCache(clock)
    call = ToolCall(id="c1.0", name="echo", arguments="{}")
    await cache.put(call, ToolResult(tool_call_id="c1.0", name="echo", content="err", is_error=True), 10)
    assert await cache.get(call) is None  # errors are never kept
    await cache.put(call, ToolResult(tool_call_id="c1.0", name="echo", content="ok"), 10)
    later = call.model_copy(update={"id": "c4.1"})
    assert await cache.get(later) == ToolResult(tool_call_id="c4.1", name="echo", content="ok", cached=True)
    clock.t += 10_000
    assert await cache.get(later) is None
