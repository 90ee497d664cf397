"""A child's usage counts against its parent's budget (issues #27 and #26), with real worker processes:
each child starts with what its parent's budget has left as its own budget, two parallel children that
together spend the parent's remainder make the parent's next model call end budget_exceeded, and a
child of a parent with little left is held to that remainder."""

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


async def test_children_that_spend_the_parents_budget_end_it_budget_exceeded_at_its_next_call(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    limit = 700  # one child spends ~420 tokens, the boss's first call ~90
    rec, kids, inputs = await run_boss(redis, redis_url, tmp_path, steps=3, children=2, limit=limit)
    own = tokens(rec.result.usage)  # the boss's one call: its second was refused
    assert [k.status.value for k in kids] == ["completed", "completed"], [k.result for k in kids]
    spent_by_kids = [tokens(k.result.usage) for k in kids]
    # each child got the boss's remainder (after its first call) as its budget, and stayed within it
    assert [i.budget.max_tokens if i.budget else None for i in inputs] == [limit - own] * 2
    assert all(s <= limit - own for s in spent_by_kids)
    assert own + spent_by_kids[0] < limit < own + sum(spent_by_kids)  # one child alone would not cross it
    assert rec.status.value == "failed", rec.result
    err = rec.result.last_error
    assert err is not None and err.code == "budget_exceeded"
    assert f"spent {own + sum(spent_by_kids)} tokens" in err.message, err.message
    assert rec.result.usage.input_tokens > 0 and rec.result.iterations == 1
    assert tokens(rec.result.children_usage) == sum(spent_by_kids)  # reported apart from its own usage


async def test_a_child_of_a_parent_with_little_left_gets_that_remainder_and_is_held_to_it(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    limit = 400
    rec, kids, inputs = await run_boss(redis, redis_url, tmp_path, steps=6, children=1, limit=limit)
    own = tokens(rec.result.usage)
    (kid,), (inp,) = kids, inputs
    assert inp.budget is not None and inp.budget.max_tokens == limit - own
    assert kid.status.value == "failed" and kid.result.last_error is not None
    assert kid.result.last_error.code == "budget_exceeded", kid.result.last_error
    assert 0 < tokens(kid.result.usage) <= limit - own  # the child never spent more than was left
    assert own + tokens(kid.result.usage) <= limit
    assert tokens(rec.result.children_usage) == tokens(kid.result.usage)
