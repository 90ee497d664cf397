"""A batch's counters and a session read from the archive once Redis forgot them, against
a real PostgreSQL (tests/support/postgres_server.py), a real redis-server, the API and a worker:
``GET /v1/batches/{id}`` (and so its run pages and results export) and ``GET /v1/sessions/{id}``
answer after the retention exactly what they answered from Redis, another tenant gets 404, and
PostgreSQL down is a 503, not a 404."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis

from shared import keys
from tests.integration.api_support import A, B, api, key, run_body, settings
from tests.integration.test_catalog import until_batch
from tests.support.postgres_server import PostgresServer, binaries
from tests.support.procs import WorkerProc, workers
from tests.support.waits import until

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(binaries() is None, reason="no PostgreSQL binaries (initdb, pg_ctl) installed"),
]
PART = keys.Partition(0, 1)
RETENTION_S = (
    8  # the batch's hash, its indexes and the session's lists expire this long after their last write
)
N = 24


def _item(i: int) -> dict[str, Any]:
    """A tool call (echo) then an answer; every 5th fails instead (the provider refuses it)."""
    if i % 5 == 3:
        return run_body([{"error": {"status": 400, "message": f"bad request {i}"}}])
    return run_body(
        [{"toolCalls": [{"name": "echo", "arguments": {"text": f"n{i}"}}]}, {"text": f"answer {i}"}]
    )


def _env(pg: PostgresServer, **extra: str) -> dict[str, str]:
    return {
        "AGENTMILL_ARCHIVE_URL": pg.url,
        "AGENTMILL_RETENTION_S": str(RETENTION_S),
        "AGENTMILL_LIVE_RETENTION_S": "1",
        "AGENTMILL_ARCHIVE_POLL_MS": "100",
        **extra,
    }


async def _reads(c: httpx.AsyncClient) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, path in (
        ("batch", "/v1/batches/arch-b"),
        ("batch runs", "/v1/batches/arch-b/runs?limit=100"),
        ("session", "/v1/sessions/arch-s"),
    ):
        r = await c.get(path)
        assert r.status_code == 200, (name, r.text)
        out[name] = r.json()
    r = await c.get("/v1/batches/arch-b/results")
    assert r.status_code == 200, r.text
    out["export"] = r.text
    return out


async def _forgotten(redis: Redis) -> bool:
    """Nothing of the runs, the batch or the session's lists left in Redis (but the session's hash)."""
    for prefix in (PART.run_prefix, PART.events_prefix, PART.batch_prefix, PART.session_runs_prefix,
                   PART.session_loops_prefix):  # fmt: skip
        async for _ in redis.scan_iter(match=prefix + "*", count=1000):
            return False
    return int(await redis.zcard(PART.archive)) == 0


async def _runs_gone(redis: Redis) -> bool:
    async for _ in redis.scan_iter(match=PART.run_prefix + "*", count=1000):
        return False
    return int(await redis.zcard(PART.archive)) == 0


@pytest.mark.timeout(180)
async def test_a_batch_and_a_session_answer_from_the_archive_once_redis_forgot_them(
    redis_url: str, redis: Redis, tmp_path: Path
) -> None:
    with PostgresServer() as pg:
        s = settings(redis_url, archive_url=pg.url, live_retention_s=1, retention_s=RETENTION_S)
        async with api(s) as base, httpx.AsyncClient(base_url=base, headers=A) as c:
            # the runs wait for the archive until the reads from Redis are taken
            with workers(redis_url, 1, env=_env(pg, AGENTMILL_WORKER_ARCHIVER="false"), log_dir=tmp_path):
                r = await c.post(
                    "/v1/runs/batch", json={"runs": [_item(i) for i in range(N)], "batchId": "arch-b"}
                )
                assert r.status_code == 200, r.text
                for i in range(4):  # a session of four turns, one with a tool call
                    script = [{"text": f"turn {i}"}]
                    if i == 1:
                        script = [{"toolCalls": [{"name": "echo", "arguments": {"text": "t"}}]}, *script]
                    extra = {"autoCreateSession": True} if i == 0 else {}
                    r = await c.post(
                        "/v1/runs", json=run_body(script, sessionId="arch-s", runId=f"s{i}", **extra)
                    )
                    assert r.status_code == 202, r.text
                view = await until_batch(c, "arch-b", lambda v: v["finished"], within=60)
                assert view["finished"], view

                async def session_done() -> bool:
                    v = (await c.get("/v1/sessions/arch-s")).json()
                    return v["activeRun"] is None and len(v["history"]) == 4

                await until("the session's turns done", session_done, within=60)
                before = await _reads(c)
                assert await redis.exists(PART.run(key("s0"))) == 1  # read from Redis
            assert before["batch"]["counts"]["failed"] == len(range(3, N, 5))
            assert before["batch"]["usage"]["inputTokens"] > 0 and before["batch"]["usage"]["estimated"]
            assert before["session"]["runs"] == ["s0", "s1", "s2", "s3"]
            archiver = WorkerProc(redis_url, env=_env(pg), argv=["-m", "app.cli", "archiver"],
                                  log=tmp_path / "archiver.log").start()  # fmt: skip
            try:
                # first the runs leave Redis, the session's lists stay: the ids of its runs come from the archive
                await until("the runs gone from Redis", lambda: _runs_gone(redis), within=30)
                r = await c.get("/v1/sessions/arch-s")
                assert (r.status_code, r.json()) == (200, before["session"])
                assert await redis.exists(PART.session_runs(key("arch-s"))) == 1  # it was read from Redis
                await until("Redis forgot the runs, the batch and the session's lists",
                            lambda: _forgotten(redis), within=RETENTION_S + 30)  # fmt: skip
            finally:
                archiver.stop()

            # the session's hash expires with its lists, the retention after its last run ended
            async def hash_gone() -> bool:
                return not await redis.exists(PART.session(key("arch-s")))

            await until("the session's hash expired", hash_gone, within=10)
            after = await _reads(c)  # the archive alone answers
            for name in ("batch", "batch runs", "export", "session"):
                assert after[name] == before[name], name
            for path, code in (
                ("/v1/batches/arch-b", "unknown_batch"),
                ("/v1/sessions/arch-s", "unknown_session"),
            ):
                r = await c.get(path, headers=B)
                assert (r.status_code, r.json()["error"]["code"]) == (404, code), path
            pg.stop()
            for path in ("/v1/batches/arch-b", "/v1/sessions/arch-s"):
                r = await c.get(path)
                assert (r.status_code, r.json()["error"]["code"]) == (503, "archive_unavailable"), path
