"""A run's ending is built in two places: by the machine (worker/machine/steps.finish, committed by its
worker) and by ``finalize`` (shared/lua/prelude.lua) for the endings from outside a worker (an abort
while queued or parked, an approval timeout, a poison run). For the same run and the same ending both
write the same events and the same result, but for ``usage``: finalize does not know the tokens a
run spent (they live in its checkpoint), so its result has none (real redis-server)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from redis.asyncio import Redis

from agentmill_client.codec import to_jsonable
from agentmill_client.statuses import RunStatus
from shared.clock import utc_day
from shared.fields import RunField
from shared.scripts import Scripts
from tests.integration.helpers import producer_for, script_run, stream
from tests.support.lua_probe import prelude_probe
from tests.support.schema import K
from worker import machine as m

pytestmark = pytest.mark.integration

T0 = 1_000_000
Ending = tuple[list[tuple[str, dict[str, Any]]], dict[str, Any]]  # events (kind, payload), result

FINALIZE = "return finalize(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2], ARGV[3], ARGV[4])"


def machine_ending(run_id: str, session_id: str | None, event: m.Event) -> Ending:
    """What the worker would commit: the Emit commands' (kind, payload) and the Finish result."""
    _, cmds = m.decide(m.initial_state(run_id, session_id), event)
    events = [(c.kind.value, c.payload) for c in cmds if isinstance(c, m.Emit)]
    (finish,) = [c for c in cmds if isinstance(c, m.Finish)]
    result = to_jsonable(finish.result)
    assert result.pop("usage") == {
        "inputTokens": 0,
        "outputTokens": 0,
        "estimated": False,
        "cacheReadTokens": 0,
        "cacheWriteTokens": 0,
    }  # finalize lacks it
    return events, result


async def lua_ending(redis: Redis, run_id: str) -> Ending:
    events = [(e.kind.value, e.payload) for e in await stream(redis, run_id)]
    return events, orjson.loads(await redis.hget(K.run(run_id), RunField.RESULT) or b"null")


async def queued_run(redis: Redis, redis_url: str, run_id: str, session_id: str | None) -> None:
    extra: dict[str, Any] = {"sessionId": session_id, "autoCreateSession": True} if session_id else {}
    await producer_for(redis, redis_url).submit(script_run([{"text": "x"}], runId=run_id, **extra))


@pytest.mark.parametrize("session_id", [None, "ses-1"])
async def test_an_abort_of_a_queued_run_ends_it_as_the_machine_would(
    redis: Redis, redis_url: str, session_id: str | None
) -> None:
    await queued_run(redis, redis_url, "r-abort", session_id)
    assert (
        await producer_for(redis, redis_url).abort("r-abort", reason="the user changed their mind")
        == "aborted"
    )
    want = machine_ending("r-abort", session_id, m.AbortRequested(T0, reason="the user changed their mind"))
    assert await lua_ending(redis, "r-abort") == want
    assert want[1]["status"] == RunStatus.ABORTED and want[1]["lastError"]["code"] == "aborted"


@pytest.mark.parametrize(
    "status, code, message, event",
    [
        (RunStatus.ABORTED, "aborted", "stop", m.AbortRequested(T0, reason="stop")),
        (RunStatus.FAILED, "poison_run", "lost", m.StartRejected(T0, code="poison_run", message="lost")),
    ],
)
async def test_finalize_writes_the_machines_ending(
    redis: Redis, status: RunStatus, code: str, message: str, event: m.Event
) -> None:
    """finalize itself, for both of its statuses: a failed run's error event, then its status."""
    await redis.hset(K.run("r-fin"), mapping={RunField.STATUS: RunStatus.QUEUED, RunField.LAST_SEQ: 0})
    probe = prelude_probe(FINALIZE)
    own = [K.run("r-fin"), K.events("r-fin"), K.tools("r-fin")]
    k, a = Scripts(redis).frame(K, own, ["r-fin", status, code, message])
    await redis.eval(probe, len(k), *k, *a)
    assert await lua_ending(redis, "r-fin") == machine_ending("r-fin", None, event)


async def test_finalize_counts_a_run_that_started_in_the_usage_report_once(redis: Redis) -> None:
    """A run a worker had started (its commit wrote its usage to the run hash) counts in its tenant's
    usage of the day with what it spent and runs=1, as a worker's ending would (worker/runner/tally.py);
    a run no worker started (no usage fields) does not count, nor does a run finalized again."""
    probe = prelude_probe(FINALIZE)
    base = {RunField.STATUS: RunStatus.AWAITING_HUMAN, RunField.LAST_SEQ: 3, RunField.TENANT: "acme"}
    spent = {
        RunField.USAGE_IN: 900,
        RunField.USAGE_OUT: 40,
        RunField.USAGE_ESTIMATED: "0",
        RunField.USAGE_COST: "0.0021",
        RunField.USAGE_CACHE_READ: 600,
        RunField.USAGE_CACHE_WRITE: 250,
    }
    await redis.hset(K.run("r-spent"), mapping={**base, RunField.AGENT: "small", **spent})
    await redis.hset(
        K.run("r-new"), mapping={**base, RunField.STATUS: RunStatus.QUEUED, RunField.AGENT: "small"}
    )
    for run_id in ("r-spent", "r-new", "r-spent"):  # the second finalize of r-spent finds it ended
        own = [K.run(run_id), K.events(run_id), K.tools(run_id)]
        k, a = Scripts(redis).frame(K, own, [run_id, RunStatus.ABORTED, "aborted", "stop"])
        await redis.eval(probe, len(k), *k, *a)
    seconds, _ = await redis.time()
    tally = await redis.hgetall(K.usage_day("acme", utc_day(seconds * 1000)))
    assert tally == {b"small|in": b"900", b"small|out": b"40", b"small|cost": b"2100000", b"small|runs": b"1",
                     b"small|cr": b"600", b"small|cw": b"250"}  # fmt: skip
    result = orjson.loads(await redis.hget(K.run("r-spent"), RunField.RESULT) or b"{}")
    assert result["usage"] == {"inputTokens": 900, "outputTokens": 40, "estimated": False, "costUsd": 0.0021,
                               "cacheReadTokens": 600, "cacheWriteTokens": 250}  # fmt: skip
