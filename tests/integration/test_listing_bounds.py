"""Listings bounded in work per call, and cursors and filters parsed strictly, through the HTTP API
on a real Redis. The big indexes are written directly, as the scripts
write them (a run hash with its tenant, an entry per index): 20,000 runs in a fraction of a second."""

from __future__ import annotations

import base64
import time
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis

from agentmill_client import limits
from producer.listing import SCAN_MAX, encode_cursor
from producer.submission import Submitted
from tests.integration.api_support import A, api, run_body, settings
from tests.integration.helpers import producer_for
from tests.support.schema import K

pytestmark = pytest.mark.integration
TENANT = "tenant-a"
N = 20_000


def b64(raw: str) -> str:
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


FORGED = [
    b64("1_000:abc"),  # MV8wMDA6YWJj: int() takes it, Redis does not
    b64("٣:abc"),
    b64("１２:abc"),
    b64("1 :abc"),
    b64("+12:abc"),
    b64("012:abc"),
    b64("12:abc\n"),
    b64("12:a{b}"),
    b64("12"),
    b64("12:abc") + "=",  # padded: never written so
    encode_cursor("12", "abc").replace("Y", "+"),
    "٣",
    "１２",
    "1 ",
    "",
    "!!!!",
    "bm90IGEgY3Vyc29y~",
    "A",  # not base64 at all
    encode_cursor("1" * 17, "abc"),  # more digits than a time has
    encode_cursor("12", "a" * 129),  # an id longer than ids are
    "QUJD" * 2000,  # overlong
]


async def fill(redis: Redis, dims: dict[str, list[int]], score: Any) -> list[str]:
    """N runs of TENANT, run ``i`` created at ``score(i)`` and listed under index ``d`` for each
    ``d`` whose list holds ``i`` (and under "all"); their ids, newest first."""
    ids = [f"run_big{i:05d}" for i in range(N)]
    pipe = redis.pipeline(transaction=False)
    for i, rid in enumerate(ids):
        pipe.hset(K.run(rid), mapping={"status": "queued", "createdAt": score(i), "tenant": TENANT})
    for key, members in [("all", range(N)), *dims.items()]:
        dim, _, value = key.partition(":")
        pipe.zadd(K.index_key(TENANT, dim, value), {ids[i]: score(i) for i in members})
    await pipe.execute()
    return [ids[i] for i in sorted(range(N), key=lambda i: (score(i), ids[i]), reverse=True)]


async def calls(redis: Redis, *commands: str) -> int:
    """Calls of those commands since the last reset (the scripts' own calls are counted too)."""
    stats = await redis.info("commandstats")
    return sum(int(stats.get(f"cmdstat_{c}", {}).get("calls", 0)) for c in commands)


async def scans(redis: Redis) -> int:
    """Index pages the listing scripts fetched since the last reset (each of at most 100 entries)."""
    return await calls(redis, "zrevrange", "zrevrangebyscore")


async def one_call(redis: Redis, c: httpx.AsyncClient, **params: Any) -> tuple[dict[str, Any], int]:
    await redis.config_resetstat()
    r = await c.get("/v1/runs", params=params)
    assert r.status_code == 200, r.text
    return r.json(), await scans(redis)


BOUND = -(-SCAN_MAX // 100)  # index pages one call may fetch
BISECT = N.bit_length() + 1  # the entries a cursor whose run left the index looks at to find its place


async def test_the_worst_listing_calls_do_bounded_work_on_a_big_index(redis_url: str, redis: Redis) -> None:
    now = int(time.time() * 1000)
    await fill(redis, {}, lambda i: now - N + i)
    async with api(settings(redis_url)) as url, httpx.AsyncClient(base_url=url, headers=A) as c:
        first, _ = await one_call(redis, c, limit=1)
        # Finding 5: the next of page 1 with createdBefore=1 skipped the whole index in one call.
        page, fetched = await one_call(redis, c, cursor=first["next"], createdBefore=1, limit=1)
        assert page == {"runs": [], "next": None}
        assert fetched <= BOUND, fetched
        # 20,000 runs created in the same ms, and a cursor whose run left the index: the next page
        # starts right after it, found without walking the runs of that time before it.
        await redis.zadd(K.index_key(TENANT, "all"), {f"run_big{i:05d}": now for i in range(N)})
        await redis.zrem(K.index_key(TENANT, "all"), "run_big05000")
        page, fetched = await one_call(redis, c, cursor=encode_cursor(str(now), "run_big05000"), limit=3)
        assert [x["runId"] for x in page["runs"]] == ["run_big04999", "run_big04998", "run_big04997"]
        assert fetched <= BISECT, fetched
        page, fetched = await one_call(redis, c, cursor=encode_cursor(str(now), "0"), limit=3)
        assert page == {"runs": [], "next": None} and fetched <= BISECT, fetched


async def test_a_rare_filter_pages_through_every_match_exactly_once(redis_url: str, redis: Redis) -> None:
    now = int(time.time() * 1000)
    rare = {37, 4_000, 9_999, 10_000, 19_990}  # in both indexes; the rest in only one of them
    newest = await fill(
        redis,
        {"meta:x=1": [i for i in range(N) if i % 2 == 0 or i in rare],
         "meta:y=1": [i for i in range(N) if i % 2 == 1 or i in rare]},
        lambda i: now - N + i - (i % 3),  # some ties
    )  # fmt: skip
    expected = [r for r in newest if int(r[len("run_big") :]) in rare]
    async with api(settings(redis_url)) as url, httpx.AsyncClient(base_url=url, headers=A) as c:
        for limit in (1, 2, 50):
            found: list[str] = []
            empty, cursor = 0, None
            for _ in range(200):
                q: dict[str, Any] = {"metadata": ["x=1", "y=1"], "limit": limit}
                page, fetched = await one_call(redis, c, **q, **({"cursor": cursor} if cursor else {}))
                assert fetched <= BOUND, fetched
                assert await calls(redis, "zscore", "hmget") <= SCAN_MAX + 1  # probes and run reads
                found += [x["runId"] for x in page["runs"]]
                empty += not page["runs"] and page["next"] is not None
                cursor = page["next"]
                if cursor is None:
                    break
            assert found == expected, limit
            assert empty > 0  # some pages found nothing within the bound, and went on


async def test_forged_cursors_and_filters_are_clean_400s_on_both_listings(redis_url: str) -> None:
    async with api(settings(redis_url)) as url, httpx.AsyncClient(base_url=url, headers=A) as c:
        r = await c.post("/v1/runs/batch", json={"runs": [run_body() for _ in range(3)], "batchId": "b1"})
        assert r.status_code == 200, r.text
        for path in ("/v1/runs", "/v1/batches/b1/runs"):
            page = (await c.get(path, params={"limit": 1})).json()
            assert len(page["runs"]) == 1 and page["next"]
            assert (await c.get(path, params={"limit": 5, "cursor": page["next"]})).json()["runs"]
            for forged in FORGED:
                r = await c.get(path, params={"cursor": forged})
                assert r.status_code == 400, (path, forged, r.status_code, r.text)
                assert r.json()["error"]["code"] == "invalid_cursor", r.text
        for value in ("1_000", "٣", "１２", "1 ", "+1", "-1", "1.0", "1e3", "", "9" * 17, "9" * 5000):
            for name in ("createdBefore", "createdAfter"):
                r = await c.get("/v1/runs", params={name: value})
                assert r.status_code == 422, (name, value, r.status_code, r.text)
                assert r.json()["error"]["code"] == "invalid_input" and name in r.json()["error"]["message"]
        assert (await c.get("/v1/runs", params={"createdBefore": "9" * 16})).status_code == 200


async def test_a_batch_offset_is_bounded_and_ids_stay_short(redis_url: str) -> None:
    async with api(settings(redis_url)) as url, httpx.AsyncClient(base_url=url, headers=A) as c:
        for offset in (limits.MAX_BATCH_OFFSET + 1, int("9" * 4299), -1, "12", 1.5, True):
            r = await c.post("/v1/runs/batch", json={"runs": [run_body()], "batchId": "b2", "offset": offset})
            assert r.status_code == 422, (offset, r.text)
            assert r.json()["error"]["code"] == "invalid_input" and "offset" in r.json()["error"]["message"]
        r = await c.post(
            "/v1/runs/batch",
            json={"runs": [run_body(), run_body()], "batchId": "b2", "offset": limits.MAX_BATCH_OFFSET},
        )
        assert r.status_code == 200, r.text
        ids = [x["runId"] for x in r.json()["results"]]
        assert len(ids) == 2 and all(len(i) <= limits.MAX_ID_CHARS for i in ids), ids


async def test_a_session_view_reads_a_bounded_number_of_its_runs(redis: Redis, redis_url: str) -> None:
    # GET /v1/sessions/{id} read the session's whole list of runs: a session queued runs without
    # bound (its list is trimmed only when one of them ends). It shows the newest ones.
    p = producer_for(redis, redis_url)
    shown = limits.SESSION_RUNS_SHOWN
    runs = [{"inputMessages": [{"role": "user", "content": "go"}], "sessionId": "s-big"}] * shown
    first = await p.submit({**runs[0], "autoCreateSession": True})
    ids = [first.run_id]
    for _ in range(2):
        ids += [r.run_id for r in await p.submit_many(runs[: shown // 2 + 1]) if isinstance(r, Submitted)]
    assert len(ids) > shown
    view = await p.get_session("s-big")
    assert view is not None and view["runs"] == ids[-shown:]
