"""Payload encryption at rest (AGENTMILL_DATA_KEYS) with a real worker, the API and the PostgreSQL
archive: a marker sent as input and returned as a tool result is in no Redis key and no archive row,
while the API's reads (the run, its events, its session) serve it; a new current key leaves the old
runs readable; `agentmill keys rotate-data` seals the archive again under the current key, after which
it reads without the old one; what Redis still holds under a key removed from the list is a clear error."""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from redis.asyncio import Redis

from producer.archived import ArchiveReads
from shared import payload_crypto
from shared.archive.store import ArchiveStore
from tests.integration.api_support import A, api, settings, until_run
from tests.integration.test_deletion import archive_count, archive_traces, key_of, redis_traces
from tests.integration.test_store_content import profiles
from tests.support.cli import cli
from tests.support.postgres_server import PostgresServer, binaries
from tests.support.procs import WorkerProc
from tests.support.waits import until

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(binaries() is None, reason="no PostgreSQL binaries (initdb, pg_ctl) installed"),
]

MARK = "qv-secret-5521"  # what test_store_content's profiles' sub-agents echo too


def run(run_id: str) -> dict[str, Any]:
    script = [{"toolCalls": [{"name": "echo", "arguments": {"text": MARK}}]}, {"text": f"the answer {MARK}"}]
    return {"agent": "loud", "runId": run_id, "sessionId": "s-enc", "autoCreateSession": True,
            "inputMessages": [{"role": "user", "content": f"tell {MARK}"}], "runtimeHints": {"script": script},
            "metadata": {"endUser": "u-1"}}  # fmt: skip


def data_key() -> str:
    return base64.b64encode(os.urandom(32)).decode()


@pytest.fixture(autouse=True)
def _plain_afterwards() -> Any:
    yield
    payload_crypto.install(None)  # the API served in this process installed the test's keys


async def served(c: httpx.AsyncClient, rid: str) -> str:
    """What the API serves of a run: its view, its events and its session."""
    view = await until_run(c, rid, lambda v: v["status"] == "completed", within=30)
    events = await c.get(f"/v1/runs/{rid}/events", params={"format": "json"})
    assert events.status_code == 200, events.text
    return str(view["result"]) + events.text


async def test_a_marker_is_stored_nowhere_in_plaintext_and_read_back_through_every_rotation(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    path = profiles(tmp_path)
    pg = PostgresServer()
    pg.start()
    k1, k2 = f"k1:{data_key()}", f"k2:{data_key()}"
    env = {"AGENTMILL_PROFILES": path, "AGENTMILL_ARCHIVE_URL": pg.url, "AGENTMILL_ARCHIVE_POLL_MS": "100",
           "AGENTMILL_LIVE_RETENTION_S": "600"}  # fmt: skip

    def s(keys: str) -> Any:
        return settings(redis_url, profiles=path, archive_url=pg.url, data_keys=keys)

    w = WorkerProc(redis_url, env={**env, "AGENTMILL_DATA_KEYS": k1}, log=tmp_path / "w1.log").start()
    try:
        async with api(s(k1)) as base, httpx.AsyncClient(base_url=base, headers=A, timeout=30) as c:
            r = await c.post("/v1/runs", json=run("r-one"))
            assert r.status_code == 202, r.text
            assert MARK in await served(c, "r-one")
            session = (await c.get("/v1/sessions/s-enc")).json()
            assert MARK in str(session["history"]), session
            # a fork starts from the sealed original: its origin and copied records are stored sealed too
            fork = await c.post("/v1/runs/r-one/fork", json={"atSeq": 3, "inputMessages": [
                {"role": "user", "content": f"again {MARK}"}]})  # fmt: skip
            assert fork.status_code in (200, 201, 202), fork.text
            assert MARK in await served(c, fork.json()["runId"])
            assert await redis_traces(redis, [MARK]) == []
            await until("archived", lambda: archive_count(pg.url, [key_of("r-one")]), 20)
            await until("archived", lambda: archive_count(pg.url, [key_of(fork.json()["runId"])]), 20)
            assert await archive_traces(pg.url, [MARK]) == []
        w.stop()
        # a new current key: new writes use it, the runs sealed with the old one still read
        w = WorkerProc(
            redis_url, env={**env, "AGENTMILL_DATA_KEYS": f"{k2},{k1}"}, log=tmp_path / "w2.log"
        ).start()
        async with api(s(f"{k2},{k1}")) as base, httpx.AsyncClient(base_url=base, headers=A, timeout=30) as c:
            r = await c.post("/v1/runs", json=run("r-two"))
            assert r.status_code == 202, r.text
            assert MARK in await served(c, "r-two")
            assert MARK in await served(c, "r-one")
            await until("archived", lambda: archive_count(pg.url, [key_of("r-two")]), 20)
            assert await redis_traces(redis, [MARK]) == [] and await archive_traces(pg.url, [MARK]) == []
            (run_key,) = [k async for k in redis.scan_iter(match=f"*:run:{key_of('r-two')}")]
            assert b"enc1:k2:" in await redis.hget(run_key, "result")  # type: ignore[misc]
        # the archive sealed again under the current key, with progress; a second pass has nothing left
        out = cli(redis_url, "keys", "rotate-data", "--page", "1", "--json",
                  env={"AGENTMILL_ARCHIVE_URL": pg.url, "AGENTMILL_DATA_KEYS": f"{k2},{k1}"})  # fmt: skip
        assert out.returncode == 0, out.stderr
        assert "rotate-data: 1/3 runs" in out.stderr and "rotate-data: 3/3 runs" in out.stderr, out.stderr
        assert orjson.loads(out.stdout)["rows"] > 0, out.stdout
        assert await archive_traces(pg.url, ["enc1:k1:", MARK]) == []
        again = cli(redis_url, "keys", "rotate-data", "--json",
                    env={"AGENTMILL_ARCHIVE_URL": pg.url, "AGENTMILL_DATA_KEYS": f"{k2},{k1}"})  # fmt: skip
        assert orjson.loads(again.stdout)["rows"] == 0, again.stdout
        # a run sealed with the old key, queued: a worker that no longer lists it fails the run, clearly
        w.stop()
        async with api(s(k1)) as base, httpx.AsyncClient(base_url=base, headers=A, timeout=30) as c:
            assert (await c.post("/v1/runs", json=run("r-three"))).status_code == 202
        w = WorkerProc(redis_url, env={**env, "AGENTMILL_DATA_KEYS": k2}, log=tmp_path / "w3.log").start()
        # the old key removed: the archive reads under the new key alone (r-one's archived run), while
        # what Redis still holds under the old key (the live retention) is a clear error
        payload_crypto.install(k2)
        reads = ArchiveReads(ArchiveStore(pg.url))
        try:
            rec = await reads.record([key_of("r-one")], None)
            events = await reads.events(key_of("r-one"), after=0, limit=100, label="r-one")
            assert rec is not None and MARK in str(rec.result) and MARK in str(events)
        finally:
            await reads.aclose()
        async with api(s(k2)) as base, httpx.AsyncClient(base_url=base, headers=A, timeout=30) as c:
            assert MARK in await served(c, "r-two")
            r = await c.get("/v1/runs/r-one/events", params={"format": "json"})
            assert r.status_code == 500 and r.json()["error"]["code"] == "data_key_unavailable", r.text
            assert "'k1'" in r.json()["error"]["message"]
            view = await until_run(c, "r-three", lambda v: v["status"] == "failed", within=30)
            assert view["result"]["lastError"]["code"] == "data_key_unavailable", view
    finally:
        w.stop()
        pg.stop()
