"""The history archive (docs/operations.md#archive) against a real PostgreSQL started by the
test (initdb, pg_ctl; skipped when the binaries are missing), a real redis-server, the API and real
worker processes: finished runs are archived exactly once through an outage and a worker SIGKILLed
between a batch's write and its marking, leave Redis after the live retention, and every API read
answers afterwards exactly what it answered from Redis."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import orjson
import pytest
from redis.asyncio import Redis

from shared import keys
from shared.archive.schema import MIGRATIONS, migrate
from shared.archive.store import ArchiveStore
from tests.integration.api_support import A, B, api, run_body, settings, until_batch
from tests.support.postgres_server import PostgresServer, binaries
from tests.support.procs import WorkerProc, workers
from tests.support.waits import until

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(binaries() is None, reason="no PostgreSQL binaries (initdb, pg_ctl) installed"),
]
PART = keys.Partition(0, 1)
LIVE_S = 1  # an archived run leaves Redis a second later


def _item(i: int) -> dict[str, Any]:
    """A tool call (echo) then an answer; every 9th fails instead (the provider refuses it). Each
    has metadata; every 100th is in one session."""
    extra: dict[str, Any] = {"metadata": {"team": f"t{i % 3}", "tenth": i % 10 == 0}}
    if i % 100 == 7:
        extra |= {"sessionId": "hist-s", "autoCreateSession": True}
    if i % 9 == 4:
        return run_body([{"error": {"status": 400, "message": f"bad request {i}"}}], **extra)
    script = [{"toolCalls": [{"name": "echo", "arguments": {"text": f"n{i}"}}]}, {"text": f"answer {i}"}]
    return run_body(script, **extra)


def _env(pg: PostgresServer, **extra: str) -> dict[str, str]:
    return {
        "AGENTMILL_ARCHIVE_URL": pg.url,
        "AGENTMILL_LIVE_RETENTION_S": str(LIVE_S),
        "AGENTMILL_ARCHIVE_POLL_MS": "100",
        "AGENTMILL_ARCHIVE_LEASE_MS": "1000",
        **extra,
    }


async def _batch(c: httpx.AsyncClient, batch_id: str, n: int) -> list[str]:
    ids: list[str] = []
    for start in range(0, n, 1000):
        runs = [_item(i) for i in range(start, min(n, start + 1000))]
        body = {"runs": runs, "batchId": batch_id, "offset": start, "more": start + 1000 < n}
        r = await c.post("/v1/runs/batch", json=body, timeout=60)
        while r.status_code == 429:  # the default submission rate (10,000 runs: 1,000 a second)
            await asyncio.sleep(float(r.headers.get("Retry-After", "1")))
            r = await c.post("/v1/runs/batch", json=body, timeout=60)
        assert r.status_code == 200, r.text
        ids += [x["runId"] for x in r.json()["results"]]
    return ids


async def _sse(c: httpx.AsyncClient, run_id: str, **params: Any) -> str:
    async with c.stream("GET", f"/v1/runs/{run_id}/events", params=params, timeout=30) as r:
        assert r.status_code == 200
        return (await r.aread()).decode()


async def _reads(c: httpx.AsyncClient, ids: list[str], batch_id: str) -> dict[str, Any]:
    """Every read the API answers about the runs: each run, its events (a page, a replay after=),
    SSE for some, the batch's results export, the listings (all, by status, the batch's pages)."""
    out: dict[str, Any] = {}
    sem = asyncio.Semaphore(16)

    async def one(i: int, rid: str) -> None:
        async with sem:
            got = [(await c.get(f"/v1/runs/{rid}")).json()]
            got.append(
                (await c.get(f"/v1/runs/{rid}/events", params={"format": "json", "limit": 1000})).json()
            )
            got.append((await c.get(f"/v1/runs/{rid}/events", params={"format": "json", "after": 2})).json())
            if i % 50 == 0:
                got.append(await _sse(c, rid))
                got.append(await _sse(c, rid, after=3))
            out[rid] = got

    await asyncio.gather(*(one(i, r) for i, r in enumerate(ids)))
    export = await c.get(f"/v1/batches/{batch_id}/results", timeout=60)
    assert export.status_code == 200
    out["export"] = export.text
    for name, path, params in (
        ("listing", "/v1/runs", {"limit": 80}),  # pages across what Redis and the archive hold
        ("failed", "/v1/runs", {"status": "failed", "limit": 50}),
        ("batch runs", f"/v1/batches/{batch_id}/runs", {"limit": 120}),
        ("by metadata", "/v1/runs", {"metadata": ["team=t1", "tenth=true"], "limit": 7}),
        ("by session", "/v1/runs", {"sessionId": "hist-s", "limit": 4}),
        ("by agent", "/v1/runs", {"agent": "scripted", "status": "completed", "limit": 100}),
    ):
        pages, cursor = [], None
        while True:
            r = await c.get(path, params={**params, **({"cursor": cursor} if cursor else {})})
            assert r.status_code == 200, r.text
            pages.append(r.json())
            if not (cursor := r.json().get("next")):
                break
        out[name] = pages
    return out


async def _backlog(redis: Redis) -> int:
    return int(await redis.zcard(PART.archive))


async def _left_in_redis(redis: Redis) -> int:
    """Run hashes, streams and tool records still in Redis."""
    n = 0
    for prefix in (PART.run_prefix, PART.events_prefix, PART.tools_prefix):
        async for _ in redis.scan_iter(match=prefix + "*", count=1000):
            n += 1
    return n


async def _counts(pg: PostgresServer) -> tuple[int, int, int, dict[str, int]]:
    """Rows of runs, events and tool records, and each run's events by its client id."""
    conn = await asyncpg.connect(pg.url)
    try:
        runs = await conn.fetchval("SELECT count(*) FROM runs")
        events = await conn.fetchval("SELECT count(*) FROM run_events")
        tools = await conn.fetchval("SELECT count(*) FROM run_tools")
        rows = await conn.fetch(
            "SELECT r.client_id, count(e.seq) AS n, max(r.last_seq) AS last FROM runs r "
            "JOIN run_events e USING (key_id, created_at) GROUP BY r.client_id"
        )
        for row in rows:  # seq 1..lastSeq each exactly once
            assert row["n"] == row["last"], dict(row)
        return runs, events, tools, {row["client_id"]: row["n"] for row in rows}
    finally:
        await conn.close()


@pytest.mark.timeout(400)
async def test_finished_runs_are_archived_through_an_outage_expire_and_read_the_same(
    redis_url: str, redis: Redis, tmp_path: Path
) -> None:
    """200 runs finish while PostgreSQL is down (the backlog holds them all, nothing lost); the
    reads are taken from Redis (by an API without the archive: with it, the export answers 503 while
    the archive is unreachable); PostgreSQL comes up, goes down again mid-catch-up for 3 s and up again; every
    run is archived once, leaves Redis after the live retention, and every read answers the same."""
    await _through_an_outage(redis_url, redis, tmp_path, 200, 3.0)


@pytest.mark.slow
@pytest.mark.timeout(1800)
async def test_10000_runs_through_a_30_s_outage(redis_url: str, redis: Redis, tmp_path: Path) -> None:
    """The issue's figures: 10,000 runs, PostgreSQL down for all of them and for 30 s mid-catch-up."""
    await _through_an_outage(redis_url, redis, tmp_path, 10_000, 30.0)


async def _through_an_outage(redis_url: str, redis: Redis, tmp_path: Path, n: int, down_s: float) -> None:
    pg = PostgresServer()  # initialised, not started: the archive is down from the start
    try:
        s = settings(redis_url, archive_url=pg.url, live_retention_s=LIVE_S)
        async with api(s) as base, httpx.AsyncClient(base_url=base, headers=A) as c:
            # batches of n / 10: the second outage comes mid-way through the catch-up's ten or more
            batch = str(max(20, min(40, n // 10)))
            with workers(redis_url, 2, env=_env(pg, AGENTMILL_ARCHIVE_BATCH=batch), log_dir=tmp_path):
                ids = await _batch(c, "hist", n)
                await until_batch(c, "hist", lambda v: v["finished"], within=180 + n / 10)
                assert await _backlog(redis) == n
                assert await redis.zcard(PART.index_key("tenant-a", "all")) == n  # listed from Redis
                async with (
                    api(settings(redis_url)) as plain,
                    httpx.AsyncClient(base_url=plain, headers=A) as pc,
                ):
                    before = await _reads(pc, ids, "hist")  # as an API without an archive reads Redis
                # another tenant's id is looked up in the archive too: unreachable, 503 (not a 404)
                r = await c.get(f"/v1/runs/{ids[0]}", headers=B)
                assert (r.status_code, r.json()["error"]["code"]) == (503, "archive_unavailable")
                pg.start()
                await until("some runs archived", lambda: _less(redis, n), within=60, every=0.02)
                pg.stop()  # down again mid-way, for some seconds
                await asyncio.sleep(down_s)
                pg.start()
                await until("an empty backlog", lambda: _less(redis, 1), within=120 + n / 20)
                await until("the runs gone from Redis", lambda: _none_left(redis), within=LIVE_S + 30)
            # nothing of the runs is left in Redis: no hash, stream, tool records, listing or active entry
            assert await redis.zcard(PART.index_key("tenant-a", "all")) == 0
            assert await redis.zcard(PART.index_key("tenant-a", "item", "hist")) == 0
            assert await redis.zcard(PART.tenant_active("tenant-a")) == 0
            runs, events, tools, per_run = await _counts(pg)
            assert runs == n and len(per_run) == n
            assert events == sum(len(before[r][1]["events"]) for r in ids)
            assert tools == sum(1 for i in range(n) if i % 9 != 4)  # one echo call per completed run
            after = await _reads(c, ids, "hist")
            for rid in ids:
                assert after[rid] == before[rid], rid
            assert after["export"] == before["export"]
            assert len(after["export"].splitlines()) == n
            for name in ("listing", "failed", "batch runs", "by metadata", "by session", "by agent"):
                assert after[name] == before[name], name
            assert sum(len(p["runs"]) for p in after["listing"]) == n
            assert sum(len(p["runs"]) for p in after["by session"]) == len(range(7, n, 100))
            assert sum(len(p["runs"]) for p in after["by metadata"]) == len(range(10, n, 30))
            for rid in ids[::100]:  # another tenant: no such run, in Redis or the archive
                r = await c.get(f"/v1/runs/{rid}", headers=B)
                assert (r.status_code, r.json()["error"]["code"]) == (404, "unknown_run")
                r = await c.get(f"/v1/runs/{rid}/events", headers=B, params={"format": "json"})
                assert r.status_code == 404
    finally:
        pg.close()


async def _less(redis: Redis, n: int) -> bool:
    return await _backlog(redis) < n


async def _none_left(redis: Redis) -> bool:
    return await _left_in_redis(redis) == 0


@pytest.mark.timeout(300)
async def test_an_archiver_killed_between_write_and_marking_archives_nothing_twice(
    redis_url: str, redis: Redis, tmp_path: Path
) -> None:
    """Workers SIGKILLed right after committing a batch to PostgreSQL, before marking it archived in
    Redis (failpoint after_archive_write): the batch is claimed again after its lease, written again
    (inserting nothing), and in the end every run is in the archive exactly once."""
    n = 300
    pg = PostgresServer()
    try:
        s = settings(redis_url)
        async with api(s) as base, httpx.AsyncClient(base_url=base, headers=A) as c:
            with workers(redis_url, 2, env=_env(pg)):
                await _batch(c, "kill", n)
                await until_batch(c, "kill", lambda v: v["finished"], within=120)
        pg.start()
        assert await _backlog(redis) == n
        for k in range(3):  # each writes a batch of 40, then dies before marking it
            w = WorkerProc(redis_url, env=_env(pg, AGENTMILL_ARCHIVE_BATCH="40",
                                               AGENTMILL_FAILPOINTS="after_archive_write:1"),
                           log=tmp_path / f"killed{k}.log").start()  # fmt: skip
            assert w.wait(60) is not None, "the failpoint did not kill the worker"
            runs, _, _, _ = await _counts(pg)
            assert 40 <= runs <= 40 * (k + 1)
            assert await _backlog(redis) == n  # written, never marked
        # the rest by the archiver as its own process (`agentmill archiver`)
        archiver = WorkerProc(redis_url, env=_env(pg, AGENTMILL_ARCHIVE_BATCH="40"),
                              argv=["-m", "app.cli", "archiver"], log=tmp_path / "archiver.log").start()  # fmt: skip
        try:
            await until("an empty backlog", lambda: _less(redis, 1), within=60)
        finally:
            archiver.stop()
        runs, events, _, per_run = await _counts(pg)
        assert runs == n == len(per_run)
        conn = await asyncpg.connect(pg.url)
        try:
            dup = await conn.fetchval("SELECT count(*) - count(DISTINCT client_id) FROM runs")
        finally:
            await conn.close()
        assert dup == 0
        assert events == sum(per_run.values())
    finally:
        pg.close()


async def test_the_schema_is_created_once_by_processes_starting_together() -> None:
    """Four stores opening at once on an empty database: every migration applied once, recorded in
    agentmill_migrations; opening again applies nothing."""
    with PostgresServer() as pg:
        stores = [ArchiveStore(pg.url) for _ in range(4)]
        try:
            await asyncio.gather(*(s.pool() for s in stores))
            conn = await asyncpg.connect(pg.url)
            try:
                versions = [
                    r["version"] for r in await conn.fetch("SELECT version FROM agentmill_migrations")
                ]
                assert versions == [v for v, _ in MIGRATIONS]
                assert await migrate(conn) == MIGRATIONS[-1][0]
                assert await conn.fetchval("SELECT count(*) FROM agentmill_migrations") == len(MIGRATIONS)
                tables = {r["tablename"] for r in await conn.fetch("SELECT tablename FROM pg_tables")}
                assert {"runs", "run_events", "run_tools"} <= tables
            finally:
                await conn.close()
        finally:
            for s in stores:
                await s.aclose()


async def test_an_id_used_again_after_its_run_left_redis_is_a_new_run_and_both_are_kept(
    redis_url: str, redis: Redis
) -> None:
    """Idempotency holds while a run is in Redis; once it left, the same runId makes a new run. The
    archive keeps both (nothing of the second is dropped as a duplicate); the id answers with the
    newer."""
    with PostgresServer() as pg:
        s = settings(redis_url, archive_url=pg.url, live_retention_s=1)
        async with api(s) as base, httpx.AsyncClient(base_url=base, headers=A) as c:
            with workers(redis_url, 1, env=_env(pg, AGENTMILL_LIVE_RETENTION_S="1")):
                for answer in ("first", "second"):
                    r = await c.post("/v1/runs", json=run_body([{"text": answer}], runId="again"))
                    assert r.status_code == 202, r.text
                    await until("archived", lambda: _less(redis, 1), within=30)
                    await until("gone from Redis", lambda: _none_left(redis), within=30)
                    view = (await c.get("/v1/runs/again")).json()
                    assert view["status"] == "completed"
                    assert view["result"]["finalAssistantMessage"]["content"] == answer
                    page = (await c.get("/v1/runs/again/events", params={"format": "json"})).json()
                    assert answer in orjson.dumps(page["events"]).decode()
                    r = await c.post("/v1/runs/again/abort")  # as before it left Redis: it had finished
                    assert (r.status_code, r.json()["result"]) == (200, "finished")
                    r = await c.post("/v1/runs/again/abort", headers=B)
                    assert r.status_code == 404
        runs, events, _, _ = await _counts_all(pg)
        assert runs == 2 and events == 2 * len(page["events"])


async def _counts_all(pg: PostgresServer) -> tuple[int, int, int, None]:
    conn = await asyncpg.connect(pg.url)
    try:
        return (
            await conn.fetchval("SELECT count(*) FROM runs"),
            await conn.fetchval("SELECT count(*) FROM run_events"),
            await conn.fetchval("SELECT count(*) FROM run_tools"),
            None,
        )
    finally:
        await conn.close()
