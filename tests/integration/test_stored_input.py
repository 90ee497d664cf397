"""A sub-agent's child run stores its input as a submission of the same input does (one
canonicaliser: shared.stored_input): the same stored input and input hash, on a real Redis. A
child whose input a submission would refuse is not created, and says why."""

from __future__ import annotations

from typing import Any

from redis.asyncio import Redis

from agentmill_client import limits
from shared import children as kids
from shared.fields import RunField as F
from tests.integration.helpers import producer_for
from tests.support.schema import K

CHILD = "kid-1"


async def _stored(redis: Redis, run_id: str) -> list[Any]:
    return await redis.hmget(K.run(run_id), [F.INPUT, F.INPUT_HASH, F.TENANT])  # type: ignore[no-any-return]


async def test_a_child_stores_the_input_a_submission_of_it_stores(redis: Redis, redis_url: str) -> None:
    p = producer_for(redis, redis_url)
    for budget, store_content in (({"maxTokens": 5000}, False), (None, True)):
        spec = kids.ChildSpec(
            "call-1", CHILD, "default", 'write a haiku about "queues" é', budget, store_content
        )
        submitted: dict[str, Any] = {
            "runId": CHILD, "agent": "default", "inputMessages": [{"role": "user", "content": spec.task}],
        }  # fmt: skip
        if budget:
            submitted["budget"] = budget
        if not store_content:
            submitted["storeContent"] = False
        await p.submit(submitted)
        body, digest, tenant = await _stored(redis, CHILD)
        await redis.flushall()
        made = await kids.spawn(
            p.parts, p.scripts, parent_id="parent", tenant=tenant.decode(), lineage=b"{}", specs=[spec]
        )
        assert made["call-1"].created, made
        assert await _stored(redis, CHILD) == [body, digest, tenant]
        await redis.flushall()


async def test_a_child_a_submission_would_refuse_is_not_created_and_says_why(
    redis: Redis, redis_url: str
) -> None:
    p = producer_for(redis, redis_url)
    spec = kids.ChildSpec("call-1", CHILD, "default", "x" * (limits.MAX_MESSAGE_CHARS + 1))
    made = await kids.spawn(p.parts, p.scripts, parent_id="parent", tenant="", lineage=b"{}", specs=[spec])
    assert not made["call-1"].created
    assert made["call-1"].error.startswith(
        f"the child run {CHILD} could not be created: its input is not valid"
    )
    assert "inputMessages.0.content" in made["call-1"].error, made
    assert await redis.exists(K.run(CHILD)) == 0
