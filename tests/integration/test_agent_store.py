"""A tenant's agents in Redis (producer/agents.py, shared/lua/agent_*.lua): numbered versions, the
bounds on agents and versions, a deleted agent's versions readable by its runs until forgotten, the
pointers an API process reads again within POINTERS_FRESH_S, and a worker reading a version once."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from redis.asyncio import Redis

from producer.agents import POINTERS_FRESH_S, AgentDirectory
from producer.submission import SubmissionError
from shared.connections import connections_from
from tests.integration.helpers import producer_for
from worker.adapters.agent_cache import AgentVersions, UnknownVersionError


def body(prompt: str = "hi", name: str = "support") -> dict[str, Any]:
    return {"name": name, "provider": {"connection": "scripted"}, "systemPrompt": prompt}


async def create(d: AgentDirectory, b: dict[str, Any], tenant: str = "t1", **kw: Any) -> tuple[str, int]:
    return await d.create(tenant, b, make_current=kw.get("current", True), max_priority=9)


async def test_versions_count_up_and_the_bounds_hold(redis: Redis, redis_url: str) -> None:
    p = producer_for(redis, redis_url, max_agents=2, max_agent_versions=3)
    d = p.submitter.agents
    assert [(await create(d, body(f"v{i}")))[1] for i in range(1, 4)] == [1, 2, 3]
    with pytest.raises(SubmissionError) as info:
        await create(d, body("v4"))
    assert (info.value.status, info.value.code) == (409, "versions_full")
    await create(d, body(name="billing"))
    with pytest.raises(SubmissionError) as info:
        await create(d, body(name="third"))
    assert info.value.code == "agents_full"
    assert (await create(d, body(name="third"), tenant="t2"))[1] == 1  # another tenant's own count
    assert [n for n, _ in await d.listing("t1")] == ["billing", "support"]
    found = await d.version("t1", "support", 2)
    assert found is not None and found[1].system_prompt == "v2"
    assert await d.version("t2", "support", 1) is None


async def test_a_deleted_agents_versions_stay_for_its_runs_then_are_forgotten(
    redis: Redis, redis_url: str
) -> None:
    p = producer_for(redis, redis_url, max_agents=1)
    d = p.submitter.agents
    await create(d, body("v1"))
    await d.point("t1", "support", "delete")
    assert await d.pointers("t1", "support") is None
    parts = p.parts
    worker = AgentVersions(parts, connections_from(None, dev=True))
    assert (await worker.get("t1", "support", 1)).system_prompt == "v1"  # a running run still reads it
    with pytest.raises(SubmissionError):  # kept deleted agents count while they are kept
        await create(d, body(name="other"))
    d.keep_ms = 0  # its runs are over: a creation forgets it
    assert (await create(d, body("new", name="other")))[1] == 1
    with pytest.raises(UnknownVersionError):
        await AgentVersions(parts, connections_from(None, dev=True)).get("t1", "support", 1)


async def test_pointers_are_read_again_within_the_freshness_and_versions_once(
    redis: Redis, redis_url: str
) -> None:
    p = producer_for(redis, redis_url)
    api_a, api_b = p.submitter.agents, producer_for(redis, redis_url).submitter.agents
    await create(api_a, body("v1"))
    assert (await api_b.pointers("t1", "support")).current == 1  # type: ignore[union-attr]
    await create(api_a, body("v2"))
    assert (await api_a.pointers("t1", "support")).current == 2  # type: ignore[union-attr]  # its own change: at once
    await asyncio.sleep(POINTERS_FRESH_S + 0.05)
    assert (await api_b.pointers("t1", "support")).current == 2  # type: ignore[union-attr]  # another process: within it
    reads = api_b.reads
    for _ in range(50):
        await api_b.choices("t1", [("support", None)])
    assert api_b.reads - reads <= 1  # at most one read of the pointers within the freshness
    worker = AgentVersions(p.parts, connections_from(None, dev=True))
    for _ in range(20):
        await worker.get("t1", "support", 2)
    assert worker.reads == 1


async def test_an_unknown_version_or_agent_is_refused(redis: Redis, redis_url: str) -> None:
    d = producer_for(redis, redis_url).submitter.agents
    await create(d, body())
    refusal = (await d.choices("t1", [("support@9", None)]))[("support@9", None)].refusal
    assert refusal is not None and (refusal.code, refusal.field) == ("unknown_version", "agent")
    with pytest.raises(SubmissionError) as info:
        await d.point("t1", "support", "current", 5)
    assert info.value.code == "unknown_version"
    with pytest.raises(SubmissionError) as info:
        await d.point("t1", "nobody", "current", 1)
    assert info.value.status == 404
    assert await d.choices("t1", [("nobody", None), ("default", None)]) == {}
