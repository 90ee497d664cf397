"""How often the scripts that create, take and end a run read Redis: a submission asks whether the run
or its tombstone exists in one EXISTS, acquire_run reads track's fields in its own HMGET, and a
commit that ends the run reads in its one HMGET what the ending reads (track's fields, whether the
run stores no content, its parent and children). Counted by INFO commandstats on a real
redis-server; what those reads decide (the status indexes, the ending's handoff) is checked beside.
And what a commit is sent: the run's key alone."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from redis.asyncio import Redis

from producer.submission import SubmissionError
from shared.fields import RunField
from shared.scripts import Scripts
from shared.settings import Settings
from tests.integration.helpers import producer_for, script_run
from tests.support.schema import K, parts_of
from worker.adapters.redis_store import RedisRunStore as RunStore
from worker.adapters.worker_beat import beat
from worker.core.acquisition import Acquired
from worker.core.commit_step import CommitStep, Outbox
from worker.core.store_errors import FencedError

pytestmark = pytest.mark.integration

TENANT = "default"


async def reads(redis: Redis, commands: tuple[str, ...] = ("hmget", "hget", "hgetall")) -> dict[str, int]:
    """The calls of ``commands`` since the last CONFIG RESETSTAT."""
    stats = await redis.info("commandstats")
    return {c: int(stats.get(f"cmdstat_{c}", {}).get("calls", 0)) for c in commands}


async def taken(redis: Redis, redis_url: str, rid: str) -> RunStore:
    """Run ``rid`` submitted, then taken by worker w1; the hash reads of the acquire checked."""
    settings = Settings(redis_url=redis_url, lease_ms=5_000)
    producer = producer_for(redis, redis_url)
    await redis.config_resetstat()
    await producer.submit(script_run([{"text": "x"}], runId=rid))
    assert (await reads(redis, ("exists",)))["exists"] == 1  # the run and its tombstone, together
    scripts = Scripts.for_settings(redis, settings)
    await beat(parts_of(redis), scripts, "w1", settings.lease_ms, register=True)
    store = RunStore(parts_of(redis), scripts, settings, K, rid)
    await redis.config_resetstat()
    assert isinstance(await store.acquire(1, "w1"), Acquired)
    # its check with track's fields, then what the worker gets back (and the tools hash)
    assert await reads(redis) == {"hmget": 2, "hget": 0, "hgetall": 1}
    assert await redis.zscore(K.index_key(TENANT, "status", "running"), rid) is not None
    assert await redis.zscore(K.index_key(TENANT, "status", "queued"), rid) is None
    return store


def ended(status: str) -> CommitStep:
    payload = orjson.dumps({"status": status})
    return CommitStep(Outbox([("status", 1, payload)]), status=status, aux=b"{}")


async def test_an_ending_commit_reads_the_run_hash_once(redis: Redis, redis_url: str) -> None:
    store = await taken(redis, redis_url, "r-reads")
    await redis.config_resetstat()
    await store.commit(ended("completed"))
    assert await reads(redis) == {"hmget": 1, "hget": 0, "hgetall": 0}
    assert await redis.zscore(K.index_key(TENANT, "status", "completed"), "r-reads") is not None
    assert await redis.zscore(K.index_key(TENANT, "status", "running"), "r-reads") is None
    assert await redis.hget(K.run("r-reads"), RunField.HANDOFF) is None  # no parent, no children


async def test_the_ending_reads_children_the_same_commit_wrote(redis: Redis, redis_url: str) -> None:
    """Children the ending commit itself records are the ones its handoff sees: a failed run with
    children is marked to abort them."""
    store = await taken(redis, redis_url, "r-kids")
    children = orjson.dumps([{"toolCallId": "c1.0", "runId": "r-child"}])
    await redis.config_resetstat()
    await store.commit(CommitStep(ended("failed").outbox, status="failed", aux=b"{}", children=children))
    assert (await reads(redis))["hmget"] == 1
    assert await redis.hget(K.run("r-kids"), RunField.HANDOFF) == b"a"


async def test_an_id_again_is_answered_by_its_run_or_its_tombstone(redis: Redis, redis_url: str) -> None:
    """The one EXISTS's other answers: the same run again (its record answers), another input under
    the id (a conflict), and an id whose run was deleted (its tombstone refuses it)."""
    producer = producer_for(redis, redis_url)
    first = await producer.submit(script_run([{"text": "x"}], runId="r-again"))
    again = await producer.submit(script_run([{"text": "x"}], runId="r-again"))
    assert again.run_id == first.run_id
    with pytest.raises(SubmissionError, match="different input"):
        await producer.submit(script_run([{"text": "y"}], runId="r-again"))
    await redis.set(K.gone("r-gone"), "1")
    with pytest.raises(SubmissionError, match="was deleted"):
        await producer.submit(script_run([{"text": "x"}], runId="r-gone"))
    assert not await redis.exists(K.run("r-gone"))


async def test_a_commit_sends_the_run_key_alone_and_is_still_fenced_by_the_lease(
    redis: Redis, redis_url: str
) -> None:
    """commit.lua builds the run's stream, tools hash and lease keys from the ids it is sent: one key a
    commit (four before); its writes land in those keys, and a lapsed lease still refuses it."""
    store = await taken(redis, redis_url, "r-keys")
    sent: list[list[Any]] = []
    run = store._run

    async def recorded(script: Any, own_keys: list[Any], args: list[Any]) -> Any:
        sent.append(list(own_keys))
        return await run(script, own_keys, args)

    store._run = recorded  # type: ignore[method-assign]
    claim = CommitStep(Outbox([("tool_call", 1, b"{}")], claims=["c1"]), checkpoint=b'{"seq":2,"state":{}}')
    await store.commit(claim)
    await store.commit(CommitStep(Outbox([("tool_result", 1, b"{}")], records=[("c1", b'{"state":"done"}')])))
    assert sent == [[K.run("r-keys")]] * 2
    assert [e[0] for e in await redis.xrange(K.events("r-keys"))] == [b"1-0", b"2-0", b"3-0"]
    assert orjson.loads((await redis.hget(K.tools("r-keys"), "c1")) or b"{}") == {"state": "done"}
    await redis.delete(K.worker_lease("w1"))  # its lease lapsed; no one took the run over yet
    with pytest.raises(FencedError):
        await store.commit(CommitStep(Outbox([("status", 1, b"{}")])))
    assert await redis.xlen(K.events("r-keys")) == 3
