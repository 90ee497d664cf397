"""Script calls of one loop turn share a round trip, each with its own reply (worker/adapters/batcher.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from redis.asyncio import Redis
from redis.exceptions import ResponseError

from shared.functions import EvalScript, FunctionScript, Library, Script
from shared.redis_conn import connect
from shared.route import pipelined
from shared.settings import Settings
from tests.support.schema import K, parts_of
from worker.adapters import batcher
from worker.adapters.batcher import ScriptBatcher

pytestmark = pytest.mark.integration

INCR = "redis.call('INCR', KEYS[1]); if ARGV[1] == 'boom' then return redis.error_reply('boom') end; return ARGV[1]"
Forget = Callable[[], Awaitable[Any]]


@pytest.fixture(params=["evalsha", "fcall"])
def incr(request: pytest.FixtureRequest, redis: Redis) -> tuple[Script, Forget]:
    """INCR as a script run by EVALSHA or as a function of a library; and how Redis forgets it
    (a restart without persistence: SCRIPT FLUSH, FUNCTION FLUSH)."""
    if request.param == "evalsha":
        return EvalScript(redis, INCR), redis.script_flush
    lib = Library(
        "t1", f"#!lua name=agentmill_t1\nredis.register_function('incr_t1', function(KEYS, ARGV) {INCR} end)"
    )
    return FunctionScript(redis, lib, "incr"), lambda: redis.execute_command("FUNCTION", "FLUSH")


async def test_calls_of_one_turn_go_in_pipelines_of_max_batch_each_with_its_reply(
    redis: Redis, incr: tuple[Script, Forget]
) -> None:
    script, _forget = incr
    await script(keys=["warm"], args=["x"])  # loaded once, as the worker's scripts are
    b = ScriptBatcher(parts_of(redis))
    replies = await asyncio.gather(
        *(b.call(K, script, ["n"], [str(i)]) for i in range(50)), b.call(K, script, ["n"], ["boom"]),
        return_exceptions=True,
    )  # fmt: skip
    assert replies[:50] == [str(i).encode() for i in range(50)]
    assert isinstance(replies[50], ResponseError) and "boom" in str(replies[50])  # only its own call fails
    assert (b.max_batch, b.batches, b.calls) == (32, 2, 51)  # 32 + 19, side by side
    assert await redis.get("n") == b"51"


async def test_a_call_whose_caller_gave_up_before_the_batch_left_is_not_sent(
    redis: Redis, incr: tuple[Script, Forget]
) -> None:
    script, _forget = incr
    await script(keys=["warm"], args=["x"])
    b = ScriptBatcher(parts_of(redis))
    kept = b.call(K, script, ["n"], ["a"])
    dropped = b.call(K, script, ["n"], ["b"])
    dropped.cancel()
    assert await kept == b"a"
    await b.aclose()
    assert await redis.get("n") == b"1"


async def test_scripts_flushed_by_a_redis_restart_are_loaded_again(
    redis: Redis, incr: tuple[Script, Forget]
) -> None:
    script, forget = incr
    await script(keys=["warm"], args=["x"])
    await forget()
    b = ScriptBatcher(parts_of(redis))
    assert await asyncio.gather(b.call(K, script, ["n"], ["a"]), b.call(K, script, ["n"], ["b"])) == [
        b"a",
        b"b",
    ]
    assert await redis.get("n") == b"2"


async def test_calls_refused_for_an_unknown_script_are_sent_again_in_one_round_trip(
    redis: Redis, incr: tuple[Script, Forget]
) -> None:
    script, forget = incr
    await script(keys=["warm"], args=["x"])
    await forget()
    b = ScriptBatcher(parts_of(redis), max_batch=64)
    replies = await asyncio.gather(*(b.call(K, script, ["n"], [str(i)]) for i in range(40)))
    assert replies == [str(i).encode() for i in range(40)]
    assert (b.batches, b.calls) == (2, 80)  # the refused batch, then all of it again (not 40 singles)
    assert await redis.get("n") == b"40"


async def test_pipelined_gives_each_command_its_own_reply_and_resends_after_a_dropped_connection(
    redis: Redis, redis_url: str
) -> None:
    client = connect(Settings(redis_url=redis_url), retries=3)
    try:
        replies = await pipelined(
            client, [("SET", "a", "1"), ("INCR", "a"), ("HGET", "a", "f"), ("GET", "a")]
        )
        assert replies[:2] == [b"OK", 2] and replies[3] == b"2"  # raw replies: no callbacks
        assert isinstance(replies[2], ResponseError) and "WRONGTYPE" in str(replies[2])
        # The server drops the pooled connection: the round trip is sent again on a new one.
        killed = await redis.client_kill_filter(_type="normal", skipme=True)
        assert killed >= 1
        assert await pipelined(client, [("INCR", "a"), ("GET", "a")]) == [3, b"3"]
        # A cancel mid-read drops the connection: the pool never hands out one with a reply unread.
        task = asyncio.create_task(pipelined(client, [("BLPOP", "nothing", 5)]))
        await asyncio.sleep(0.1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await pipelined(client, [("GET", "a")]) == [b"3"]
    finally:
        await client.aclose()


async def test_a_connected_client_closes_its_pools_connections_when_closed(redis_url: str) -> None:
    # connect() builds the pool its client uses: the client's aclose() must close the pool's sockets
    # (redis-py leaves open a pool it was given, and the collector closed them, with a warning).
    client = connect(Settings(redis_url=redis_url))
    await asyncio.gather(*(client.get(f"k{i}") for i in range(3)))  # several connections in the pool
    pool = client.connection_pool
    opened = [c for c in pool._available_connections if c.is_connected]
    assert opened
    await client.aclose()
    assert not any(c.is_connected for c in opened)


async def test_a_turns_first_batch_leaves_in_the_next_turn(redis: Redis, incr: tuple[Script, Forget]) -> None:
    """The calls of one turn are sent from the turn after it, not one more turn later (a callback
    that then made the batch's task): a run's commit waits one turn, not two."""
    script, _forget = incr
    await script(keys=["warm"], args=["x"])
    b = ScriptBatcher(parts_of(redis), max_batch=2)
    loop = asyncio.get_running_loop()
    turn = 0

    def tick() -> None:
        nonlocal turn
        turn += 1
        loop.call_soon(tick)

    loop.call_soon(tick)
    await asyncio.sleep(0)
    sent_at: list[int] = []
    send = b._send

    async def stamped(batch: Any, deadline_s: float) -> None:
        sent_at.append(turn)
        await send(batch, deadline_s)

    b._send = stamped  # type: ignore[method-assign]
    called_at = turn
    replies = await asyncio.gather(*(b.call(K, script, ["n"], [str(i)]) for i in range(5)))
    assert replies == [str(i).encode() for i in range(5)]
    assert sent_at[0] == called_at + 1  # the first batch, from the turn after the calls
    assert len(sent_at) == 3 and max(sent_at) <= called_at + 2  # the others beside it


async def test_a_call_alone_is_sent_by_its_caller_and_those_made_meanwhile_wait_for_a_batch(
    redis: Redis, incr: tuple[Script, Forget], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``run``: with nothing else in flight or waiting and nothing sent for QUIET_S, the call leaves
    at once, in its caller's task (no turn of the loop first); calls made while it is out, or soon
    after another, go in the next turn's batch together."""
    script, _forget = incr
    await script(keys=["warm"], args=["x"])
    b = ScriptBatcher(parts_of(redis))
    sent: list[int] = []
    send = b._send

    async def counted(batch: Any, deadline_s: float) -> None:
        sent.append(len(batch))
        await send(batch, deadline_s)

    b._send = counted  # type: ignore[method-assign]
    first = asyncio.ensure_future(b.run(K, script, ["n"], ["a"]))
    await asyncio.sleep(0)  # its first step: sent, its reply awaited
    assert sent == [1] and b.alone == 1
    rest = [asyncio.ensure_future(b.run(K, script, ["n"], [str(i)])) for i in range(3)]
    assert await first == b"a" and await asyncio.gather(*rest) == [b"0", b"1", b"2"]
    assert sent == [1, 3] and b.alone == 0
    # The quiet window, set rather than waited for (a loaded machine's replies may take longer):
    monkeypatch.setattr(batcher, "QUIET_S", 3600.0)  # within it of the others: batched
    soon = asyncio.ensure_future(b.run(K, script, ["n"], ["y"]))
    await asyncio.sleep(0)
    assert b.alone == 0 and len(b.pending) == 1 and await soon == b"y"
    monkeypatch.setattr(batcher, "QUIET_S", 0.0)  # past it: quiet again, sent at once
    later = asyncio.ensure_future(b.run(K, script, ["n"], ["z"]))
    await asyncio.sleep(0)
    assert b.alone == 1 and await later == b"z" and sent == [1, 3, 1, 1]
    assert await redis.get("n") == b"6"
