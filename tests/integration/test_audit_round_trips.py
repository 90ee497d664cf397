"""A submission's audit entry rides in the submission's own round trip: the same number of round
trips to Redis with the entry as without it (counted as the packed writes on the connections);
and a managed key costs one read per key and API process while its cache entry lives."""

from __future__ import annotations

import httpx
import pytest
from redis.asyncio import Redis

from producer.audit import Action, Actor, command
from tests.integration.api_support import A, api, run_body, settings
from tests.integration.helpers import producer_for
from tests.support.round_trips import counted

pytestmark = pytest.mark.integration


async def test_a_submission_and_its_audit_entry_take_the_round_trips_of_the_submission_alone(
    redis: Redis, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = producer_for(redis, redis_url)
    await p.submit(run_body())  # scripts loaded, connections made
    trips = {}
    for audited in (False, True):
        audit = (
            (lambda t: command(p.parts, 1000, "default", Actor("k1", "bot", "r1"), Action.SUBMIT, t))
            if audited
            else None
        )
        with counted(monkeypatch) as n:
            for _ in range(10):
                await p.submit(run_body(), audit=audit)
        trips[audited] = n[0]
    assert trips[True] == trips[False], trips
    entries = await redis.xrange(p.parts.home("default").audit("default"))
    assert len(entries) == 10 and entries[0][1][b"actor"] == b"k1"
    print(
        f"round trips per submission: {trips[False] / 10:g} without its audit entry, {trips[True] / 10:g} with"
    )


async def test_a_managed_key_is_read_once_per_cache_life(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with api(settings(redis_url)) as url, httpx.AsyncClient(base_url=url) as c:
        key = (await c.post("/v1/keys", json={"scopes": ["read"]}, headers=A)).json()["key"]
        h = {"Authorization": f"Bearer {key}"}
        await c.get("/v1/me", headers=h)
        with counted(monkeypatch) as tok:
            for _ in range(20):
                assert (await c.get("/v1/me", headers=A)).status_code == 200
        with counted(monkeypatch) as managed:
            for _ in range(20):
                assert (await c.get("/v1/me", headers=h)).status_code == 200
        # at most one read more per 0.5 s of cache life (20 requests take well under a few of them)
        assert managed[0] - tok[0] <= 4, (tok[0], managed[0])
        print(f"/v1/me x20: {tok[0]} round trips with a token-file token, {managed[0]} with a managed key")
