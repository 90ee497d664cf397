"""The producer over 4 partitions on one Redis (Partitions.of_client): where runs live and how ids
find them, batches summed over their shares, listings merged across partitions, quotas counted
across partitions, and a batch's webhook fired once.

Redis is fakeredis when its Lua engine (lupa) is installed, else the private redis-server of
tests/conftest.py: both are fast, and the scripts run for real on either."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis

from producer import listing, webhooks
from producer.listing import Catalog, RunFilter
from producer.scope import Scope
from producer.service import Producer
from producer.submission import SubmissionError, Submitted
from shared import keys
from shared.partitions import Partitions
from shared.quotas import Quota
from shared.settings import Settings
from tests.support.schema import ids_where

COUNT = 4
TENANT = "default"


@pytest.fixture
async def client(redis_url: str) -> AsyncIterator[Redis]:
    c = Redis.from_url(redis_url)  # a flushed private redis-server: the scripts run in real Lua
    try:
        yield c
    finally:
        await c.aclose()


@pytest.fixture
def parts(client: Redis) -> Partitions[Redis]:
    return Partitions.of_client(client, COUNT)


@pytest.fixture
def producer(parts: Partitions[Redis]) -> Producer:
    return Producer(parts, settings=Settings(webhook_allow_hosts="hooks.example"))


def body(**kw: Any) -> dict[str, Any]:
    return {"inputMessages": [{"role": "user", "content": "hi"}], **kw}


def ids_with_home(layout: keys.Layout, prefix: str, index: int, n: int = 1, other: bool = False) -> list[str]:
    """``n`` ids ``prefix<k>`` whose home is partition ``index`` (or, with ``other``, is not)."""
    return ids_where(layout, prefix, n, lambda p: (p.index == index) != other)


def keyed_home(layout: keys.Layout, scope: Scope, prefix: str, index: int) -> str:
    """An id ``prefix<k>`` whose key in ``scope`` (the id a named tenant's keys use) has its home at
    partition ``index``."""
    k = 0
    while layout.home(scope.key(f"{prefix}{k}")).index != index:
        k += 1
    return f"{prefix}{k}"


def ok(sub: Submitted | SubmissionError) -> Submitted:
    assert isinstance(sub, Submitted), sub
    return sub


async def test_runs_live_in_their_sessions_partition_and_away_ids_leave_a_pointer(
    producer: Producer, client: Redis
) -> None:
    layout = producer.parts.layout
    (sid,) = ids_with_home(layout, "ses-a", 2)
    home_s = layout.parts[2]
    # Generated ids of a session's runs are drawn to live at home: no pointer.
    generated = await producer.submit(body(sessionId=sid, autoCreateSession=True))
    assert layout.home(generated.run_id) is home_s
    assert await client.exists(home_s.run(generated.run_id)) == 1
    assert await client.exists(home_s.pointer(generated.run_id)) == 0
    # A client's id whose home is another partition: the run lives with its session, its home
    # points there, and the id alone finds it.
    (away,) = ids_with_home(layout, "run-x", 2, other=True)
    sub = await producer.submit(body(sessionId=sid, runId=away))
    assert sub.created and sub.run_id == away
    assert await client.exists(home_s.run(away)) == 1
    assert await client.get(layout.home(away).pointer(away)) == b"2"
    assert 0 < await client.ttl(layout.home(away).pointer(away)) <= producer.settings.retention_s + 2 * 86_400
    rec = await producer.get(away)
    assert rec is not None and rec.session_id == sid and rec.stream_key == home_s.events(away)
    assert rec.view()["streamKey"] == home_s.events(away)
    assert await producer.locate(away) is home_s
    # The same run again is the same run; the id with another input (another session) is a conflict.
    assert not (await producer.submit(body(sessionId=sid, runId=away))).created
    (other_sid,) = ids_with_home(layout, "ses-b", 0)
    with pytest.raises(SubmissionError) as err:
        await producer.submit(body(sessionId=other_sid, autoCreateSession=True, runId=away))
    assert err.value.code == "conflict" and err.value.status == 409
    # Another tenant's run of that id is scoped under its own id, and each tenant sees its own.
    theirs = await producer.submit(body(runId=away), tenant="t2")
    assert theirs.created and theirs.run_id == away
    mine, seen = await producer.get(away, tenant=TENANT), await producer.get(away, tenant="t2")
    assert mine is not None and seen is not None and mine.key == away and seen.key != away
    assert await producer.resolve(away, "t2") == seen.key
    # Reads and controls by id go to the run's partition.
    assert await producer.abort(away, reason="enough") == "aborted"
    events = await producer.read_events(away)
    assert [e.payload.get("status") for e in events] == ["aborted"]
    session = await producer.get_session(sid)
    assert session is not None and session["runs"] == [generated.run_id, away]
    listed, _ = await Catalog(producer).list_runs(TENANT, RunFilter(session_id=sid))
    assert sorted(r["runId"] for r in listed) == sorted([generated.run_id, away])
    assert await producer.abort("run-nowhere") == "unknown" and await producer.get("run-nowhere") is None


async def test_a_batch_over_four_partitions_sums_its_shares_and_fires_its_webhook_once(
    producer: Producer, client: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    layout, cat = producer.parts.layout, Catalog(producer)
    results = await producer.submit_many(
        [body() for _ in range(40)], batch_id="b1", batch_webhook="http://hooks.example/b"
    )
    assert all(ok(r).created for r in results)
    shares = {p.index: await client.hgetall(p.batch(TENANT, "b1")) for p in layout.parts}  # type: ignore[misc]
    assert (
        sum(1 for h in shares.values() if h) >= 2
        and sum(int(h.get(b"total", 0)) for h in shares.values()) == 40
    )
    view = await cat.batch(TENANT, "b1")
    assert view is not None and (view["total"], view["done"], view["counts"]["queued"]) == (40, 0, 40)
    assert not view["finished"] and view["finishedAt"] is None

    posted: list[tuple[str, bytes]] = []

    async def fake_request(http: Any, method: str, url: str, **kw: Any) -> httpx.Response:
        posted.append((kw["headers"]["X-Agentmill-Delivery"], kw["content"]))
        return httpx.Response(200)

    monkeypatch.setattr(webhooks, "guarded_request", fake_request)
    # One share ends: its delivery is dropped, the batch is not finished.
    first = next(p for p in layout.parts if shares[p.index])
    for r in results:
        assert isinstance(r, Submitted)
        if await producer.locate(r.run_id) is first:
            assert await producer.abort(r.run_id) == "aborted"
    async with httpx.AsyncClient() as http:
        assert await webhooks.deliver_once(producer.parts, producer.settings, http) == 1
        assert posted == [] and await client.zcard(first.webhooks_due) == 0
        view = await cat.batch(TENANT, "b1")
        assert view is not None and 0 < view["done"] < 40 and not view["finished"]
        # The rest ends: every other share queues a delivery, and exactly one posts the sum.
        verdicts = await cat.abort_batch(TENANT, "b1", "stop")
        assert verdicts["aborted"] == 40 - view["done"]
        view = await cat.batch(TENANT, "b1")
        assert (
            view is not None and view["finished"] and view["done"] == 40 and view["counts"]["aborted"] == 40
        )
        assert view["finishedAt"] == max(
            int(h[b"finishedAt"])
            for h in [await client.hgetall(p.batch(TENANT, "b1")) for p in layout.parts]  # type: ignore[misc]
            if h
        )
        assert await webhooks.deliver_once(producer.parts, producer.settings, http) >= 1
        assert await webhooks.deliver_once(producer.parts, producer.settings, http) == 0
    assert len(posted) == 1 and posted[0][0] == producer.scope(TENANT).batch_delivery("b1")
    assert b'"total":40' in posted[0][1] and b'"finished":true' in posted[0][1]
    # A finished batch takes no new runs, on any partition.
    again = await producer.submit_many([body() for _ in range(8)], batch_id="b1", offset=40)
    assert {r.code for r in again if isinstance(r, SubmissionError)} == {"batch_finished"} and len(again) == 8


async def test_a_batch_part_after_some_shares_finished_is_taken_everywhere(
    producer: Producer, client: Redis
) -> None:
    cat = Catalog(producer)
    results = [ok(r) for r in await producer.submit_many([body() for _ in range(12)], batch_id="b2")]
    where = {r.run_id: await producer.locate(r.run_id) for r in results}
    first = next(iter(where.values()))
    assert first is not None
    for rid, p in where.items():
        if p is first:
            await producer.abort(rid)
    assert await client.hexists(first.batch(TENANT, "b2"), "finishedAt")  # type: ignore[misc]
    more = [ok(r) for r in await producer.submit_many([body() for _ in range(12)], batch_id="b2", offset=12)]
    assert all(r.created for r in more)
    assert first in [await producer.locate(r.run_id) for r in more]  # its share was opened again
    view = await cat.batch(TENANT, "b2")
    assert view is not None and view["total"] == 24 and not view["finished"] and view["finishedAt"] is None
    await cat.abort_batch(TENANT, "b2", "stop")
    view = await cat.batch(TENANT, "b2")
    assert view is not None and view["finished"] and view["done"] == 24 and view["finishedAt"] is not None


async def all_pages(cat: Catalog, flt: RunFilter, limit: int) -> list[str]:
    out: list[str] = []
    cursor = None
    for _ in range(500):
        page, cursor = await cat.list_runs(TENANT, flt, limit=limit, cursor=cursor)
        assert len(page) <= limit
        out += [r["runId"] for r in page]
        if cursor is None:
            return out
    raise AssertionError("the cursor never ended")


async def test_listing_pages_across_four_partitions_are_complete_and_ordered(
    producer: Producer, monkeypatch: pytest.MonkeyPatch
) -> None:
    cat = Catalog(producer)
    runs = [
        (await producer.submit(body(metadata={"i": i, "team": "red" if i % 2 else "blue"}))).run_id
        for i in range(30)
    ]
    many = await producer.submit_many(
        [body(metadata={"i": 30 + i, "team": "red" if i % 2 else "blue"}) for i in range(30)]
    )
    runs += [ok(r).run_id for r in many]
    created = {}
    for i, rid in enumerate(runs):
        rec = await producer.get(rid)
        assert rec is not None
        created[rid] = (rec.created_at_ms, rid, i)
    assert len({(await producer.locate(r)) for r in runs}) == COUNT
    newest_first = [r for r in sorted(runs, key=lambda r: created[r][:2], reverse=True)]
    for limit in (1, 7, 60, 100):
        assert await all_pages(cat, RunFilter(), limit) == newest_first
    # A sparse filter: the partitions stop at their scan limit, each at its own place.
    for i in range(0, 60, 4):
        await producer.abort(runs[i])
        await producer.abort(runs[i + 1])
    expected = [r for r in newest_first if created[r][2] % 4 == 3]
    monkeypatch.setattr(listing, "SCAN_MAX", 2)
    flt = RunFilter(status="queued", metadata=("team=red",))
    for limit in (1, 3, 50):
        assert await all_pages(cat, flt, limit) == expected
    aborted = [r for r in newest_first if created[r][2] % 4 in (0, 1)]
    assert await all_pages(cat, RunFilter(status="aborted"), 4) == aborted


async def test_quotas_count_a_tenants_runs_on_every_partition(producer: Producer, client: Redis) -> None:
    layout = producer.parts.layout
    (sa,), (sb,) = ids_with_home(layout, "ses-q", 0), ids_with_home(layout, "ses-q", 1)
    q = Quota(max_active=5)
    first = [await producer.submit(body(sessionId=sa, autoCreateSession=True), quota=q) for _ in range(3)]
    first += [await producer.submit(body(sessionId=sb, autoCreateSession=True), quota=q) for _ in range(2)]
    with pytest.raises(SubmissionError) as err:
        await producer.submit(body(), quota=q)
    assert err.value.code == "quota_exceeded" and err.value.status == 429 and err.value.retry_after_s == 5
    assert err.value.message.startswith("this tenant has 5 queued and running runs and may have 5")
    refused = await producer.submit_many([body(), body()], quota=q)
    assert [r.code for r in refused if isinstance(r, SubmissionError)] == ["quota_exceeded"] * 2
    assert all(
        isinstance(r, SubmissionError) and r.message.startswith(f"runs.{i}: ") for i, r in enumerate(refused)
    )
    # A run that ended frees its place, wherever the next run goes.
    assert await producer.abort(first[0].run_id) == "aborted"
    (sc,) = ids_with_home(layout, "ses-q", 3)
    assert (await producer.submit(body(sessionId=sc, autoCreateSession=True), quota=q)).created
    # A refusal gives the rate counter its runs back; the rate is counted once per request.
    # A bucket of 2 refilled at 1 a second: the refused run's token comes back, so the third
    # submission is refused by maxActive again, not by the rate.
    q2 = Quota(max_active=1, submits_per_second=1, submit_burst=2)
    assert (await producer.submit(body(), tenant="t2", quota=q2)).created
    for _ in range(2):
        with pytest.raises(SubmissionError) as refusal:
            await producer.submit(body(), tenant="t2", quota=q2)
        assert refusal.value.code == "quota_exceeded"
    limited = await producer.submit_many(
        [body() for _ in range(3)], tenant="t3", quota=Quota(submits_per_second=2)
    )
    assert {r.code for r in limited if isinstance(r, SubmissionError)} == {"rate_limited"} and len(
        limited
    ) == 3


async def test_a_request_over_the_quota_across_partitions_is_refused_whole(
    producer: Producer, client: Redis
) -> None:
    layout = producer.parts.layout
    sa, sb, sc = (keyed_home(layout, producer.scope("t4"), "ses-w", i) for i in (0, 1, 3))
    q = Quota(max_active=3)
    for _ in range(2):
        ok(await producer.submit(body(sessionId=sa, autoCreateSession=True), tenant="t4", quota=q))
    # Each partition alone has room for one; together the request would be one too many.
    two = [body(sessionId=sb, autoCreateSession=True), body(sessionId=sc, autoCreateSession=True)]
    refused = await producer.submit_many(two, tenant="t4", quota=q)
    assert [r.code for r in refused if isinstance(r, SubmissionError)] == ["quota_exceeded"] * 2
    assert [await client.zcard(layout.parts[i].tenant_active("t4")) for i in range(COUNT)] == [2, 0, 0, 0]
    assert ok((await producer.submit_many(two[:1], tenant="t4", quota=q))[0]).created
    # At its quota, a tenant sending the same runs again takes no new room.
    q5 = Quota(max_active=2)
    s5 = [ids_with_home(layout, "ses-v", i)[0] for i in (0, 1)]
    same = [body(sessionId=s, autoCreateSession=True, runId=f"t5-{s}") for s in s5]
    assert all(ok(r).created for r in await producer.submit_many(same, tenant="t5", quota=q5))
    assert not any(ok(r).created for r in await producer.submit_many(same, tenant="t5", quota=q5))


async def test_a_refusal_uncounts_only_what_the_request_added(
    parts: Partitions[Redis], client: Redis
) -> None:
    from producer.admission import _give_back

    p = parts.parts[1]
    await client.zadd(p.tenant_active("t7"), {"before": 1_000, "ours": 2_000, "theirs": 2_000})
    await _give_back(parts, "t7", 2_000, {1: ["before", "ours"]})
    assert await client.zrange(p.tenant_active("t7"), 0, -1) == [b"before", b"theirs"]
