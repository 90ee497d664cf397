"""A child's usage counts against its parent's budget, with real worker processes:
the children of one round share what their parent's budget has left (five parallel children spend no
more than it in all), and a child of a parent with little left is held to that remainder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from redis.asyncio import Redis

from agentmill_client.models import RunInput, Usage
from tests.integration.helpers import assert_clean_stream, producer_for, stream, wait_all
from tests.support.procs import WorkerProc
from tests.support.schema import K

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

MAX_TOKENS = 50  # every model's maxTokens: a call's worst-case reply


def profiles(tmp_path: Path, steps: int) -> str:
    """boss delegates to spender, which calls echo ``steps`` times, then answers."""
    scripted = {"kind": "scripted", "mode": "script", "maxTokens": MAX_TOKENS}
    script = [{"toolCalls": [{"name": "echo", "arguments": {"text": f"step {i}"}}]} for i in range(steps)]
    spender = {"name": "spender", "tools": ["echo"], "loopLimits": {"maxIterations": 100},
               "provider": {**scripted, "script": [*script, {"text": "spent"}]}}  # fmt: skip
    boss = {"name": "boss", "provider": scripted, "agentTools": [{"agent": "spender", "name": "spend"}]}
    path = tmp_path / "profiles.json"
    path.write_bytes(orjson.dumps({"profiles": [boss, spender]}))
    return str(path)


def boss_run(children: int, max_tokens: int) -> dict[str, Any]:
    ask = {"toolCalls": [{"name": "spend", "arguments": {"task": f"t{i}"}} for i in range(children)]}
    return {"agent": "boss", "inputMessages": [{"role": "user", "content": "go"}],
            "runtimeHints": {"script": [ask, {"text": "boss done"}]}, "budget": {"maxTokens": max_tokens}}  # fmt: skip


def tokens(u: Usage | None) -> int:
    return u.input_tokens + u.output_tokens if u is not None else 0


async def run_boss(
    redis: Redis, redis_url: str, tmp_path: Path, steps: int, children: int, limit: int
) -> Any:
    path = profiles(tmp_path, steps)
    p = producer_for(redis, redis_url, profiles=path)
    sub = await p.submit(boss_run(children, limit))
    w = WorkerProc(redis_url, env={"AGENTMILL_PROFILES": path}, log=tmp_path / "w.log").start()
    try:
        rec = (await wait_all(p, [sub.run_id], 60))[sub.run_id]
        events = await stream(redis, sub.run_id)
        kids = [e.payload["childRunId"] for e in events if e.kind == "child_started"]
        kid_recs = await wait_all(p, kids, 30)
    finally:
        w.stop()
    assert_clean_stream(events)
    inputs = [RunInput.model_validate_json(await redis.hget(K.run(k), "input") or b"{}") for k in kids]
    return rec, [kid_recs[k] for k in kids], inputs


async def test_five_parallel_children_share_the_parents_budget_and_spend_no_more_than_it(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    limit = 5_000  # the boss's first call ~300 tokens; one child alone would spend ~1,400 if it could
    rec, kids, inputs = await run_boss(redis, redis_url, tmp_path, steps=3, children=5, limit=limit)
    own = tokens(rec.result.usage)  # its call before the children and, if it could afford it, the one after
    # each child got an equal fifth of what the boss had left after its first call, not all of it
    (share,) = {i.budget.max_tokens if i.budget else None for i in inputs}
    assert share is not None and limit // 6 < share <= limit // 5
    spent_by_kids = [tokens(k.result.usage) for k in kids]
    assert all(0 < s <= share for s in spent_by_kids), spent_by_kids
    assert own + sum(spent_by_kids) <= limit  # the whole tree within the boss's budget
    assert {k.status.value for k in kids} == {"failed"}  # each ran out of its share, not the boss's
    assert all(k.result.last_error and k.result.last_error.code == "budget_exceeded" for k in kids)
    assert tokens(rec.result.children_usage) == sum(spent_by_kids)  # reported apart from its own usage


async def test_a_child_of_a_parent_with_little_left_gets_that_remainder_and_is_held_to_it(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    limit = 1_200  # the boss's first call ~300 tokens, each of the child's ~350
    rec, kids, inputs = await run_boss(redis, redis_url, tmp_path, steps=6, children=1, limit=limit)
    own = tokens(rec.result.usage)
    (kid,), (inp,) = kids, inputs
    assert inp.budget is not None and inp.budget.max_tokens == limit - own
    assert kid.status.value == "failed" and kid.result.last_error is not None
    assert kid.result.last_error.code == "budget_exceeded", kid.result.last_error
    assert 0 < tokens(kid.result.usage) <= limit - own  # the child never spent more than was left
    assert own + tokens(kid.result.usage) <= limit
    assert tokens(rec.result.children_usage) == tokens(kid.result.usage)
