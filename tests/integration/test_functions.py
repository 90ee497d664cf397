"""The scripts as one Redis Functions library: every script is a function of it, the
library's shared code keeps no state from one call to the next, a node that lost the library gets it
again on the way (as NOSCRIPT does for EVALSHA), start-up chooses Functions or EVALSHA, and a
library of another version is replaced. Against a real redis-server (7.x)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from redis.asyncio import Redis

from shared import functions
from shared.fields import RunField
from shared.functions import Library
from shared.partitions import Partitions
from shared.scripts import SCRIPTS, Scripts, library, prepare_scripts
from shared.settings import Settings
from tests.integration.helpers import producer_for, script_run
from tests.support.schema import K, parts_of
from worker.adapters.batcher import ScriptBatcher
from worker.adapters.worker_beat import beat

pytestmark = pytest.mark.integration


def beat_keys(lease_id: str) -> list[str]:
    """beat.lua's own keys for a worker (shared.calls.steps.Beat)."""
    return [K.worker_inbox(lease_id), K.worker_lease(lease_id), K.answer_workers]


async def _libraries(redis: Redis) -> dict[str, list[str]]:
    """{library name: its function names} of the agentmill libraries on the node."""
    out: dict[str, list[str]] = {}
    for lib in await redis.execute_command("FUNCTION", "LIST", "LIBRARYNAME", "agentmill_*"):
        entry = dict(zip(lib[::2], lib[1::2], strict=True))
        names = [dict(zip(f[::2], f[1::2], strict=True))[b"name"].decode() for f in entry[b"functions"]]
        out[entry[b"library_name"].decode()] = sorted(names)
    return out


async def _calls(redis: Redis) -> dict[str, int]:
    stats = await redis.info("commandstats")
    return {k: int(v["calls"]) for k, v in stats.items() if k in ("cmdstat_fcall", "cmdstat_evalsha")}


async def test_start_up_loads_one_library_with_every_script_as_a_function(redis: Redis) -> None:
    await redis.execute_command("FUNCTION", "FLUSH")
    assert await prepare_scripts(parts_of(redis), Settings(redis_functions="on"))
    lib = library()
    names = [*SCRIPTS, "contexts"]  # contexts: the context tokens a process tells it (shared.functions)
    assert await _libraries(redis) == {lib.name: sorted(f"{n}_{lib.version}" for n in names)}
    # the shared files once, not once per script that uses them
    assert lib.code.count("local function now_ms()") == 1
    assert lib.code.count("local function enter_prelude(") == 1


@pytest.mark.parametrize("use_functions", [True, False], ids=["fcall", "evalsha"])
async def test_each_call_starts_afresh_its_clock_and_its_partition(
    redis: Redis, redis_url: str, use_functions: bool
) -> None:
    """The library's shared code runs once, when it loads: the clock reading and the partition
    context of one call must not leak into the next (enter_clock, enter_prelude)."""
    s = Settings(redis_url=redis_url, partitions=2, redis_functions="on" if use_functions else "off")
    parts: Partitions[Any] = Partitions.of_client(redis, 2)
    producer = producer_for(parts, redis_url, partitions=2, redis_functions=s.redis_functions)
    assert producer.scripts.functions is use_functions
    p0, p1 = parts.parts
    before = await _calls(redis)
    home = {p0.index: "", p1.index: ""}
    k = 0
    while not all(home.values()):  # a run homed on each partition, 30 ms apart
        rid = f"r{k}"
        k += 1
        if not home[parts.home(rid).index]:
            await producer.submit(script_run([{"text": "x"}], runId=rid))
            home[parts.home(rid).index] = rid
            await asyncio.sleep(0.03)
    first, second = home[p0.index], home[p1.index]
    created = {}
    for part, rid in ((p0, first), (p1, second)):
        assert await redis.exists(part.run(rid)) == 1  # in its own partition's keys
        created[rid] = int(await redis.hget(part.run(rid), RunField.CREATED_AT) or 0)
        assert await redis.zscore(part.queue, part.job_id(rid, 1)) is not None
    assert abs(created[first] - created[second]) >= 25  # each call read Redis's clock anew
    after = await _calls(redis)
    used = "cmdstat_fcall" if use_functions else "cmdstat_evalsha"
    assert after.get(used, 0) - before.get(used, 0) >= 2


async def test_a_node_that_lost_the_library_gets_it_again_on_every_route(redis: Redis) -> None:
    """A restarted node without persistence has no library: a direct call, a batched call
    (shared/route.py) and a pipelined one (the beat) each load it and go on."""
    scripts = Scripts(redis, functions=True)
    await redis.execute_command("FUNCTION", "FLUSH")
    assert not (await beat(parts_of(redis), scripts, "w1", 5_000, register=True)).lost
    assert library().name in await _libraries(redis)

    await redis.execute_command("FUNCTION", "FLUSH")
    k, a = scripts.frame(K, beat_keys("w2"), ["w2", 5_000, 10, "1"])
    assert (await scripts.beat(keys=k, args=a))[0] == b"ok"

    await redis.execute_command("FUNCTION", "FLUSH")
    batcher = ScriptBatcher(parts_of(redis))
    k, a = scripts.frame(K, beat_keys("w3"), ["w3", 5_000, 10, "1"])
    replies = await asyncio.gather(*(batcher.call(K, scripts.beat, k, a) for _ in range(3)))
    assert [r[0] for r in replies] == [b"ok"] * 3
    assert library().name in await _libraries(redis)


async def test_start_up_replaces_a_library_of_another_version(redis: Redis) -> None:
    await redis.execute_command("FUNCTION", "FLUSH")
    old = Library("0123456789ab", "#!lua name=agentmill_0123456789ab\n"
                  "redis.register_function('commit_0123456789ab', function(k, a) return 1 end)\n")  # fmt: skip
    await old.load(redis)
    assert await prepare_scripts(parts_of(redis), Settings(redis_functions="auto"))
    assert list(await _libraries(redis)) == [library().name]
    # an old process still running meets "Function not found" and loads its own again
    with pytest.raises(Exception, match="Function not found"):
        await redis.execute_command("FCALL", "commit_0123456789ab", 0)
    await old.load(redis)
    assert sorted(await _libraries(redis)) == sorted([library().name, old.name])  # side by side


class _OldRedis:
    """A master that answers INFO as Redis 6.2 (no Functions)."""

    async def info(self, section: str) -> dict[str, str]:
        return {"redis_version": "6.2.14"}


async def test_start_up_falls_back_to_evalsha_below_redis_7(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(functions, "_chosen", None)
    assert functions.use_functions("auto")  # until start-up has chosen
    assert not await functions.prepare([_OldRedis()], "auto", library())
    assert not functions.use_functions("auto") and functions.use_functions("on")
    with pytest.raises(RuntimeError, match=r"Functions need 7\.0"):
        await functions.prepare([_OldRedis()], "on", library())
    assert not await functions.prepare([_OldRedis()], "off", library())


async def test_a_call_on_a_partition_sends_a_token_for_its_context_and_keys(redis: Redis) -> None:
    """With Functions a call on a partition sends its context's token (a few bytes, not the some
    500 of the context, which Lua would hash byte by byte) and, having keys of its own, not the
    partition's eight fixed keys: the library keeps both per token."""
    scripts = Scripts(redis, functions=True)
    own = beat_keys("w1")
    k, a = scripts.frame(K, own, ["w1", 5_000, 10, "1"])
    command = scripts.beat.command(k, a)
    assert command[2:6] == (3, *own) and len(command) == 6 + 4 + 1
    assert len(command[-1]) < 64 and command[-1] != scripts.context(K)
    assert (await scripts.beat(keys=k, args=a))[0] == b"ok"  # the library told the token on the way
    assert await redis.zscore(K.workers, "w1") is not None  # the fixed keys (the workers zset) found by token
    # a call with no key of its own keeps the fixed keys (a cluster redirects it by them)
    assert scripts.beat.command(*scripts.frame(K, [], ["w1", 5_000, 10, ""]))[2] == 8


async def test_an_unknown_token_is_refused_before_the_call_does_anything(redis: Redis) -> None:
    scripts = Scripts(redis, functions=True)
    k, a = scripts.frame(K, beat_keys("w1"), ["w1", 5_000, 10, "1"])
    command = list(scripts.beat.command(k, a))
    await library().load(redis)
    command[-1] = "ctx:0000000000000000"
    with pytest.raises(Exception, match=functions.NO_CONTEXT):
        await redis.execute_command(*command)
    assert await redis.exists(K.worker_lease("w1"), K.workers) == 0


async def test_a_library_that_forgot_its_tokens_is_told_them_again_on_every_route(redis: Redis) -> None:
    """A library loaded again (a restarted node, another process's FUNCTION LOAD REPLACE) knows no
    token: a direct call, a batched call (shared/route.py) and a pipelined one (the beat) each tell
    it and go on."""
    scripts = Scripts(redis, functions=True)
    forget = lambda: redis.execute_command("FUNCTION", "LOAD", "REPLACE", library().code)  # noqa: E731
    await forget()
    assert not (await beat(parts_of(redis), scripts, "w1", 5_000, register=True)).lost
    await forget()
    k, a = scripts.frame(K, beat_keys("w2"), ["w2", 5_000, 10, "1"])
    assert (await scripts.beat(keys=k, args=a))[0] == b"ok"
    await forget()
    batcher = ScriptBatcher(parts_of(redis))
    k, a = scripts.frame(K, beat_keys("w3"), ["w3", 5_000, 10, "1"])
    replies = await asyncio.gather(*(batcher.call(K, scripts.beat, k, a) for _ in range(3)))
    assert [r[0] for r in replies] == [b"ok"] * 3
