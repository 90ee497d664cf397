"""A deletion whose archive rows another transaction holds (an archiver's write, its worker paused)
answers within its bounded wait, with ``archivePending``; the workers' deleters delete the rows once
they are free. Real redis-server, real PostgreSQL, the API and a real worker process; the lock is
held by a transaction of the test's own (SELECT … FOR UPDATE), as a paused archiver's would be."""

from __future__ import annotations

import time
from pathlib import Path

import asyncpg
import httpx
import pytest
from redis.asyncio import Redis

from shared import keys
from tests.integration.api_support import A, api, run_body, settings, until_run
from tests.integration.test_deletion import archive_count, archive_env, key_of, needs_pg
from tests.support.postgres_server import PostgresServer
from tests.support.procs import WorkerProc
from tests.support.waits import until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


PART = keys.Partition(0, 1)


async def archive_gone(url: str, key: str) -> bool:
    return not await archive_count(url, [key])


async def _none_left(redis: Redis) -> bool:
    return await redis.zcard(PART.archive_erasures) == 0


@needs_pg
async def test_a_delete_behind_a_locked_archive_row_answers_within_its_bound_and_the_rows_go_later(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    pg = PostgresServer()
    pg.start()
    w = WorkerProc(redis_url, env=archive_env(pg), log=tmp_path / "w.log").start()
    s = settings(redis_url, archive_url=pg.url, deletion_lock_timeout_ms=300)
    try:
        async with api(s) as url, httpx.AsyncClient(base_url=url, headers=A, timeout=60) as c:
            run_id = (await c.post("/v1/runs", json=run_body())).json()["runId"]
            await until_run(c, run_id, lambda v: v.get("status") == "completed")
            key = key_of(run_id)
            await until("the run archived", lambda: archive_count(pg.url, [key]), 20)

            holder = await asyncpg.connect(pg.url)
            tx = holder.transaction()
            await tx.start()
            try:
                await holder.fetch("SELECT 1 FROM runs WHERE key_id = $1 FOR UPDATE", key)
                t0 = time.monotonic()
                r = await c.delete(f"/v1/runs/{run_id}")
                took = time.monotonic() - t0
                assert r.status_code == 200, r.text
                assert r.json()["archivePending"] is True and r.json()["runsDeleted"] == 1, r.json()
                assert took < 5.0, took  # the bounded wait (0.3 s) and the rest, not the lock's holder
                assert (await c.get(f"/v1/runs/{run_id}")).status_code == 404
                assert await archive_count(pg.url, [key])  # held: still there
            finally:
                await tx.rollback()
                await holder.close()
            # freed: a worker's deleter deletes them (tried again every 2 s)
            await until("the archive rows deleted", lambda: archive_gone(pg.url, key), 20)
            assert await until("the erasure done", lambda: _none_left(redis), 5)
            again = (await c.delete(f"/v1/runs/{run_id}")).json()
            assert again["alreadyDeleted"] is True and again["archivePending"] is False
    finally:
        w.stop()
        pg.stop()
