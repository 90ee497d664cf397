"""A run's megabytes (a fork's input and state) stay out of Lua: a script copies each byte into a Lua
string and out again, milliseconds in which Redis runs no other tenant's command, where a plain
command copies it once.

- the fork's store: its input and origin staged by a plain HSET, renamed into the run's hash
  (submit_restored.lua), so the script's arguments are small;
- the claim: acquire_run.lua leaves a payload from LARGE_BYTES on out of its reply; the worker reads
  it after with one transaction that also checks it still holds the run at the claim's epoch, and
  one that lost the run meanwhile (its lease lapsed, another worker took it) starts nothing;
- the ending: commit.lua's check of the run's storeContent reads a flag written at submission, not
  the input.

Counted from the commands Redis ran (SLOWLOG at 0 µs logs every command with its arguments, those
the scripts ran too) and the replies' bytes: the machine's load does not change them.
"""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis

from shared.calls.steps import Acquire
from shared.scripts import Scripts
from shared.settings import Settings
from tests.integration.api_support import A, key, settings
from tests.integration.helpers import running_worker
from tests.support.large_forks import MESSAGE_CHARS, MESSAGES, ended, large_run, ready_client
from tests.support.schema import K, parts_of
from worker.adapters.redis_store import RedisRunStore
from worker.adapters.worker_beat import beat
from worker.core.acquisition import Acquired, NotAcquired

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

_MORE = re.compile(rb"\.\.\. \((\d+) more bytes\)")


def sent_bytes(entry: dict[str, Any]) -> int:
    """The bytes of a SLOWLOG entry's arguments (Redis shows a long one's first 128 and the count left)."""
    cmd: bytes = entry["command"]
    return len(cmd) + sum(int(n) for n in _MORE.findall(cmd))


def reply_bytes(reply: Any) -> int:
    if isinstance(reply, bytes | str):
        return len(reply)
    return sum(reply_bytes(x) for x in reply) if isinstance(reply, list) else 0


@pytest.fixture
async def client(redis_url: str) -> AsyncIterator[httpx.AsyncClient]:
    # every script by FCALL: its name in SLOWLOG
    async with ready_client(settings(redis_url, redis_functions="on")) as c:
        yield c


async def slowlog(redis: Redis) -> list[dict[str, Any]]:
    return list(await redis.slowlog_get(100_000))


async def test_a_large_fork_is_stored_and_claimed_with_its_payloads_outside_lua(
    redis: Redis, redis_url: str, client: httpx.AsyncClient
) -> None:
    await redis.config_set("slowlog-max-len", 100_000)
    await redis.config_set("slowlog-log-slower-than", 0)
    async with running_worker(redis_url, redis_functions="on"):
        view = await large_run(client)
    original = K.run(key(view["runId"]))
    # Its ending checked its storeContent by the flag its submission wrote, not by reading its input.
    reads = [
        e for e in await slowlog(redis) if e["command"].startswith(b"HGET " + original.encode() + b" input")
    ]
    assert reads == []

    await redis.slowlog_reset()
    r = await client.post(f"/v1/runs/{view['runId']}/fork", json={"atSeq": view["lastSeq"]}, headers=A)
    assert r.status_code == 202, r.text
    fork = key(r.json()["runId"])
    stores = [e for e in await slowlog(redis) if e["command"].startswith(b"FCALL submit_restored")]
    assert len(stores) == 1 and sent_bytes(stores[0]) < 4_000, sent_bytes(stores[0])  # was 1.8 MB
    stored = await redis.hmget(K.run(fork), ["input", "origin", "status"])
    assert len(stored[0]) > MESSAGES * MESSAGE_CHARS and len(stored[1]) > MESSAGES * MESSAGE_CHARS
    assert stored[2] == b"queued"
    assert [k async for k in redis.scan_iter(match=K.staged_prefix + "*")] == []  # renamed into the run

    # Claimed by w-1, whose lease then lapses; w-2 takes the run before w-1 reads what was left out.
    s = Settings(redis_url=redis_url, redis_functions="on")
    scripts, parts = Scripts.for_settings(redis, s), parts_of(redis)
    await beat(parts, scripts, "w-1", 5_000, register=True)
    t = await redis.time()
    now_ms = int(t[0]) * 1000 + int(t[1]) // 1000
    args = [now_ms, 86_400_000, 10, K.in_progress_key(""), s.lease_ms, 0, "", "w-1", K.job_id(fork, 1)]
    claimed = await scripts.claim_jobs(*scripts.frame(K, [], args))
    assert len(claimed) == 3 and claimed[2][0] == b"ok"
    assert reply_bytes(claimed) < 4_000, reply_bytes(claimed)  # was 1.8 MB: the input and the state
    await redis.delete(K.worker_lease("w-1"))
    await beat(parts, scripts, "w-2", 5_000, register=True)
    call = Acquire(fork, 1, "w-2")
    taken = await scripts.acquire(*scripts.frame(K, call.keys(K), call.argv()))
    assert taken[0] == b"ok" and taken[1] == b"2" and reply_bytes(taken) < 4_000
    late = RedisRunStore(parts, scripts, s, K, fork, claimed=("w-1", claimed[2]))
    refused = await late.acquire(1, "w-1")
    assert isinstance(refused, NotAcquired) and refused.verdict == "busy" and refused.detail == "w-2"
    # w-2 reads them: one round trip after its acquisition, the payloads as stored.
    store = RedisRunStore(parts, scripts, s, K, fork, claimed=("w-2", taken))
    t0 = time.monotonic()
    got = await store.acquire(1, "w-2")
    assert isinstance(got, Acquired), got
    assert (got.epoch, store.round_trips) == (2, 1), time.monotonic() - t0
    assert got.input == stored[0] and got.origin == stored[1]


async def test_a_small_run_is_claimed_whole_in_one_round_trip(redis: Redis, redis_url: str) -> None:
    from tests.integration.helpers import producer_for, script_run

    s = Settings(redis_url=redis_url, redis_functions="on")
    await producer_for(redis, redis_url).submit(script_run([{"text": "x"}], runId="small"))
    scripts, parts = Scripts.for_settings(redis, s), parts_of(redis)
    await beat(parts, scripts, "w-1", 5_000, register=True)
    t = await redis.time()
    now_ms = int(t[0]) * 1000 + int(t[1]) // 1000
    args = [now_ms, 86_400_000, 10, K.in_progress_key(""), s.lease_ms, 0, "", "w-1", K.job_id("small", 1)]
    claimed = await scripts.claim_jobs(*scripts.frame(K, [], args))
    store = RedisRunStore(parts, scripts, s, K, "small", claimed=("w-1", claimed[2]))
    got = await store.acquire(1, "w-1")
    assert isinstance(got, Acquired) and store.round_trips == 0
    assert got.input == await redis.hget(K.run("small"), "input")


async def test_a_large_forks_first_commit_stages_its_transcript(
    redis: Redis, redis_url: str, client: httpx.AsyncClient
) -> None:
    # The fork's first commit sets its whole transcript (0.9 MB): staged by a plain SET, renamed
    # into the run's transcript key by commit.lua.
    async with running_worker(redis_url, redis_functions="on"):
        view = await large_run(client)
        await redis.config_set("slowlog-max-len", 100_000)
        await redis.config_set("slowlog-log-slower-than", 0)
        # the original's commits, logged when slower than the default's 10 ms, are not the fork's
        await redis.slowlog_reset()
        r = await client.post(f"/v1/runs/{view['runId']}/fork", json={"atSeq": view["lastSeq"]}, headers=A)
        forked = await ended(client, r.json()["runId"])
    assert forked["status"] == "completed"
    fork = key(forked["runId"])
    mine = b" " + K.run(fork).encode() + b" "  # the fork's: not a command an earlier test left logged
    commits = [
        e for e in await slowlog(redis) if e["command"].startswith(b"FCALL commit") and mine in e["command"]
    ]
    assert commits and max(sent_bytes(e) for e in commits) < 16_000, [sent_bytes(e) for e in commits]
    original = await redis.get(K.transcript(key(view["runId"])))
    copied = await redis.get(K.transcript(fork))
    assert len(copied) >= len(original) > MESSAGES * MESSAGE_CHARS
    assert [k async for k in redis.scan_iter(match=K.staged_prefix + "*")] == []
    messages = (await client.get(f"/v1/runs/{forked['runId']}", headers=A)).json()
    assert messages["status"] == "completed"
