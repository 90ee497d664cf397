"""Retry and fork of an archived run, against a real PostgreSQL, a real redis-server,
the API and a worker: a finished run is retried and forked the same whether Redis still holds its
hash (archived: without its input and checkpoint, which gave a 500) or only the archive has it
(a 404 before); a batch's archived failed runs are retried in their places; another tenant's run is
a 404. And the batch results export from the archive: one line per item index, the newest run's
(a retry that took its place, an id used again), as the archived batch counters count them."""

from __future__ import annotations

from pathlib import Path

import httpx
import orjson
import pytest
from redis.asyncio import Redis

from shared import keys
from shared.archive.store import ArchivedRun, ArchiveStore
from tests.integration.api_support import A, B, api, key, run_body, settings, until_batch
from tests.integration.test_retry_fork import ended
from tests.support.postgres_server import PostgresServer, binaries
from tests.support.procs import workers
from tests.support.waits import until

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(binaries() is None, reason="no PostgreSQL binaries (initdb, pg_ctl) installed"),
]
PART = keys.Partition(0, 1)
FAILS_ONCE = [{"error": {"status": 400, "message": "no"}}, {"text": "second time lucky"}]
# its retry answers with the messages it was given: the original's transcript, from its checkpoint
FAILS_ONCE_ECHO = [FAILS_ONCE[0], {"echoContext": True}]
TOOL_THEN_ANSWER = [{"toolCalls": [{"name": "echo", "arguments": {"text": "t"}}]}, {"text": "done"}]


async def _archived(redis: Redis, ids: list[str]) -> bool:
    """Every run of ``ids`` archived, its hash kept in Redis without its input and checkpoint."""
    for rid in ids:
        if await redis.hget(PART.run(key(rid)), "archived") != b"1":
            return False
    return int(await redis.zcard(PART.archive)) == 0


async def _seq_of(c: httpx.AsyncClient, rid: str, kind: str) -> int:
    r = await c.get(f"/v1/runs/{rid}/events", params={"format": "json", "limit": 100})
    assert r.status_code == 200, r.text
    return int(next(e["seq"] for e in r.json()["events"] if e["kind"] == kind))


async def _fork_completes(c: httpx.AsyncClient, rid: str, at: int) -> str:
    assert (await c.post(f"/v1/runs/{rid}/fork", json={"atSeq": at}, headers=B)).status_code == 404
    r = await c.post(f"/v1/runs/{rid}/fork", json={"atSeq": at})
    assert r.status_code == 202, r.text
    view = await ended(c, r.json()["runId"])
    assert (view["status"], view["forkOf"], view["atSeq"]) == ("completed", rid, at), view
    return str(r.json()["runId"])


@pytest.mark.timeout(150)
# AGENTMILL_CHECKPOINT_CONFIG and _TRANSCRIPT: the archive keeps what a checkpoint leaves out
@pytest.mark.parametrize("config", ["inline", "apart"])
async def test_an_archived_run_is_retried_and_forked_in_redis_and_from_the_archive_alone(
    redis_url: str, redis: Redis, tmp_path: Path, config: str
) -> None:
    with PostgresServer() as pg:
        env = {"AGENTMILL_ARCHIVE_URL": pg.url, "AGENTMILL_LIVE_RETENTION_S": "600",
               "AGENTMILL_ARCHIVE_POLL_MS": "100", "AGENTMILL_CHECKPOINT_CONFIG": config,
               "AGENTMILL_CHECKPOINT_TRANSCRIPT": config}  # fmt: skip
        s = settings(redis_url, archive_url=pg.url, live_retention_s=600)
        with workers(redis_url, 1, env=env, log_dir=tmp_path):
            async with api(s) as base, httpx.AsyncClient(base_url=base, headers=A, timeout=30) as c:
                batch = [run_body(FAILS_ONCE), run_body([{"text": "fine"}]), run_body(FAILS_ONCE)]
                r = await c.post("/v1/runs/batch", json={"runs": batch, "batchId": "ab"})
                assert r.status_code == 200, r.text
                items = [x["runId"] for x in r.json()["results"]]
                failed = (await c.post("/v1/runs", json=run_body(FAILS_ONCE_ECHO))).json()["runId"]
                tooled = (await c.post("/v1/runs", json=run_body(TOOL_THEN_ANSWER))).json()["runId"]
                await until_batch(c, "ab", lambda v: v["finished"], within=30)
                assert (await ended(c, failed))["status"] == "failed"
                assert (await ended(c, tooled))["status"] == "completed"
                ids = [*items, failed, tooled]
                await until("the runs archived", lambda: _archived(redis, ids), within=30)
                at = await _seq_of(c, tooled, "tool_result")

                # archived, the hash still in Redis (without input and checkpoint): was a 500
                async with (  # an API that cannot read the archive
                    api(settings(redis_url)) as bare,
                    httpx.AsyncClient(base_url=bare, headers=A) as c2,
                ):
                    r = await c2.post(f"/v1/runs/{failed}/retry")
                    assert (r.status_code, r.json()["error"]["code"]) == (409, "archive_not_configured")
                assert (await c.post(f"/v1/runs/{failed}/retry", headers=B)).status_code == 404
                r = await c.post(f"/v1/runs/{failed}/retry")
                assert r.status_code == 202, r.text
                view = await ended(c, r.json()["runId"])
                assert (view["status"], view["retryOf"]) == ("completed", failed), view
                given = orjson.loads(view["result"]["finalAssistantMessage"]["content"])["messages"]
                assert {"role": "user", "content": "go"} in given, given  # read back from the archive
                await _fork_completes(c, tooled, at)
                r = await c.post(f"/v1/runs/{items[0]}/retry")  # a batch's run: it takes its place
                assert r.status_code == 202, r.text
                first = r.json()["runId"]
                assert (await ended(c, first))["status"] == "completed"

                # only in the archive (Redis forgot the runs; the batch's counters are still there)
                for rid in ids:
                    await redis.delete(PART.run(key(rid)))
                assert (await c.get(f"/v1/runs/{tooled}")).json()["status"] == "completed"
                await _fork_completes(c, tooled, at)
                await _fork_completes(c, tooled, 0)
                store = ArchiveStore(pg.url)  # its first event lost (as a stream's MAXLEN trims one)
                await store.fetch("DELETE FROM run_events WHERE key_id = $1 AND seq = 1", key(tooled))
                await store.aclose()
                r = await c.post(f"/v1/runs/{tooled}/fork", json={"atSeq": at})
                assert (r.status_code, r.json()["error"]["code"]) == (409, "events_trimmed"), r.text
                r = await c.post(f"/v1/runs/{items[1]}/retry")
                assert (r.status_code, r.json()["error"]["code"]) == (409, "not_retryable")
                assert (await c.post(f"/v1/runs/{items[0]}/retry", headers=B)).status_code == 404
                r = await c.post("/v1/batches/ab/retry")
                assert r.status_code == 200, r.text
                retried = {x["runId"]: x["retryRunId"] for x in r.json()["results"]}
                assert set(retried) == {items[2]} and all(retried.values()), r.json()  # item 0's taken
                retried[items[0]] = first
                for rid in retried.values():
                    view = await ended(c, rid)
                    assert (view["status"], view["retryOf"]) == ("completed", next(
                        o for o, n in retried.items() if n == rid)), view  # fmt: skip
                got = await until_batch(c, "ab", lambda v: v["finished"], within=30)
                assert (got["total"], got["counts"]["completed"], got["counts"]["failed"]) == (3, 3, 0), got
                listed = (await c.get("/v1/batches/ab/runs", params={"limit": 10})).json()["runs"]
                assert {r["runId"]: r.get("retriedBy") for r in listed if r["runId"] in items} == {
                    items[0]: first,
                    items[1]: None,
                    items[2]: retried[items[2]],
                }  # the retried runs stay in the batch's listing, naming their retries
                # each place taken once: a second batch retry adds none
                assert (await c.post("/v1/batches/ab/retry")).json()["results"] == []
                expected = [(0, retried[items[0]]), (1, items[1]), (2, retried[items[2]])]
                lines = [orjson.loads(x) for x in (await c.get("/v1/batches/ab/results")).text.splitlines()]
                assert [(x["index"], x["runId"]) for x in lines] == expected

                # once the retries are archived and Redis forgot them too: the export from the
                # archive alone, where both runs of items 0 and 2 are kept, the newest per item
                news = list(retried.values())
                await until("the retries archived", lambda: _archived(redis, news), within=30)
                for rid in news:
                    await redis.delete(PART.run(key(rid)))
                lines = [orjson.loads(x) for x in (await c.get("/v1/batches/ab/results")).text.splitlines()]
                assert [(x["index"], x["runId"], x["status"]) for x in lines] == [
                    (i, rid, "completed") for i, rid in expected
                ]
                r = await c.get("/v1/batches/ab/results", params={"status": "failed"})
                assert r.status_code == 200 and r.text == ""


def _row(key_id: str, created_at: int, status: str, item: int) -> ArchivedRun:
    return ArchivedRun(
        key_id=key_id, tenant="t", client_id=key_id, status=status, created_at=created_at,
        finished_at=created_at + 1, session_id="", client_session="", agent="scripted", batch_id="b",
        item_index=item, meta=[], last_seq=0, stream_key=PART.events(key_id), input="{}",
        result=orjson.dumps({"runId": key_id, "status": status}).decode(), record={"status": status},
    )  # fmt: skip


async def test_the_archived_export_keeps_the_newest_run_of_an_item(tmp_path: Path) -> None:
    """An id used again once its run left Redis: the archive keeps both runs, and the export (as the
    batch's counters) the newest, filtered by its status, not the older one's."""
    with PostgresServer() as pg:
        store = ArchiveStore(pg.url)
        try:
            await store.write([_row("r0", 1_000, "failed", 0), _row("r1", 1_001, "completed", 1)])
            await store.write([_row("r0", 2_000, "completed", 0), _row("r2", 2_001, "failed", 2)])
            page = await store.batch_page("t", "b", None, 10)
            assert [(i, rid, st) for i, rid, st, _ in page] == [
                (0, "r0", "completed"),
                (1, "r1", "completed"),
                (2, "r2", "failed"),
            ]
            assert [r[:3] for r in await store.batch_page("t", "b", None, 10, ["failed"])] == [
                (2, "r2", "failed")
            ]
            assert [r[:3] for r in await store.batch_page("t", "b", (0, "r0"), 1)] == [(1, "r1", "completed")]
            assert await store.batch_page("u", "b", None, 10) == []  # another tenant's batch
        finally:
            await store.aclose()
