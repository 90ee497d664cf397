"""Forks of forks, as an attacker would chain them: each fork stores the state it starts from, not
its source's chain. 15 successive forks of a run with a large transcript: the 15th stores about as
much as the first, Redis's memory grows by a bounded amount per fork, and no script call writing
one takes long (SLOWLOG at threshold 0). A retry or fork whose state is past its bound is refused
(413 too_large naming the bound and the size)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from redis.asyncio import Redis

from agentmill_client import limits
from tests.integration.api_support import A, api, key, settings
from tests.support.large_forks import ended
from tests.support.procs import WorkerProc
from tests.support.schema import K

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

CHUNK = "x" * 90_000  # one message's worth (MAX_MESSAGE_CHARS is 100,000)
SCRIPT_BOUND_US = 100_000  # the longest submit_restored call (measured: about 6 ms on a loaded machine)


async def stored(redis: Redis, run_id: str) -> dict[str, int]:
    """The bytes a run keeps: its hash's big fields, its events, its transcript key, its tools."""
    k = key(run_id)
    out = {f: int(await redis.hstrlen(K.run(k), f)) for f in ("input", "origin", "ckpt")}  # type: ignore[misc]
    for name, kk in (("events", K.events(k)), ("transcript", K.transcript(k)), ("tools", K.tools(k))):
        out[name] = int(await redis.memory_usage(kk) or 0)
    return out


@pytest.fixture(params=["inline", "apart"])
async def pool(redis_url: str, request: pytest.FixtureRequest) -> Any:
    env = {"AGENTMILL_CHECKPOINT_CONFIG": request.param, "AGENTMILL_CHECKPOINT_TRANSCRIPT": request.param}
    worker = WorkerProc(redis_url, env=env).start()
    try:
        async with api(settings(redis_url)) as url, httpx.AsyncClient(base_url=url, timeout=30) as c:
            yield c
    finally:
        worker.stop()


async def test_fifteen_forks_of_forks_store_a_bounded_state_each(
    pool: httpx.AsyncClient, redis: Redis
) -> None:
    c = pool
    run = {"agent": "scripted", "inputMessages": [{"role": "user", "content": CHUNK} for _ in range(4)],
           "runtimeHints": {"script": [{"text": CHUNK[:50_000]}]}}  # fmt: skip
    r = await c.post("/v1/runs", json=run, headers=A)
    assert r.status_code == 202, r.text
    rid = r.json()["runId"]
    view = await ended(c, rid)
    assert view["status"] == "completed"
    sizes = [await stored(redis, rid)]
    mem = [int((await redis.info("memory"))["used_memory"])]
    await redis.config_set("slowlog-log-slower-than", 0)
    await redis.config_set("slowlog-max-len", 10_000)
    await redis.slowlog_reset()
    src = rid
    for i in range(15):
        last = (await c.get(f"/v1/runs/{src}", headers=A)).json()["lastSeq"]
        body = {"atSeq": last, "inputMessages": [{"role": "user", "content": f"fork {i}"}]}
        r = await c.post(f"/v1/runs/{src}/fork", json=body, headers=A)
        assert r.status_code == 202, r.text
        src = r.json()["runId"]
        assert (await ended(c, src))["status"] == "completed"
        sizes.append(await stored(redis, src))
        mem.append(int((await redis.info("memory"))["used_memory"]))
    slow = [e for e in await redis.slowlog_get(10_000) if b"submit_restored" in e["command"]]
    assert len(slow) == 15
    # The 15th fork stores what the first did, and the message each appends (no chain of origins: each
    # stored its source's last checkpoint, events and origin again, +100 KB to 2.5 MB per fork).
    assert 400_000 < sizes[1]["origin"] < 500_000
    assert sizes[15]["origin"] - sizes[1]["origin"] < 15 * 300
    assert sum(sizes[15].values()) <= sum(sizes[1].values()) + 15 * 300
    # Redis grows by about one fork's keys per fork (the first's, with room for its job and indexes).
    assert mem[15] - mem[1] <= 14 * (sum(sizes[1].values()) + 256_000), (mem, sizes)
    # The script writing one moves its input and state, within MAX_RESTORED_BYTES: a few ms each.
    assert max(e["duration"] for e in slow) < SCRIPT_BOUND_US, slow


async def test_a_fork_past_the_bound_of_what_it_stores_is_refused_naming_it(
    pool: httpx.AsyncClient, redis: Redis
) -> None:
    """Each fork appends 900 KB of messages (each within a submission's bounds), so the state a fork
    starts from grows: past MAX_RESTORED_BYTES the next is refused, naming the bound and its size."""
    c = pool
    r = await c.post("/v1/runs", json={"agent": "scripted", "inputMessages": [{"role": "user", "content": "go"}]},
                     headers=A)  # fmt: skip
    src = r.json()["runId"]
    assert (await ended(c, src))["status"] == "completed"
    big = [{"role": "user", "content": CHUNK} for _ in range(10)]
    # The messages a fork appends count as a submission's inputMessages do.
    over = await c.post(
        f"/v1/runs/{src}/fork", json={"atSeq": 1, "inputMessages": [*big, *big[:2]]}, headers=A
    )
    assert over.status_code == 413 and "at most 1000000" in over.text, over.text
    private = [
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://10.0.0.1/a.png"}}]}
    ]
    refused = await c.post(f"/v1/runs/{src}/fork", json={"atSeq": 1, "inputMessages": private}, headers=A)
    assert refused.status_code == 422 and "may not be reached" in refused.text, refused.text
    for _ in range(6):
        last = (await c.get(f"/v1/runs/{src}", headers=A)).json()["lastSeq"]
        r = await c.post(f"/v1/runs/{src}/fork", json={"atSeq": last, "inputMessages": big}, headers=A)
        if r.status_code != 202:
            break
        src = r.json()["runId"]
        assert (await ended(c, src))["status"] == "completed"
        assert await redis.hstrlen(K.run(key(src)), "origin") <= limits.MAX_RESTORED_BYTES  # type: ignore[misc]
    else:
        raise AssertionError("no fork was refused")
    err = r.json()["error"]
    assert r.status_code == 413 and err["code"] == "too_large", r.text
    assert f"at most {limits.MAX_RESTORED_BYTES}" in err["message"] and "would store" in err["message"]
