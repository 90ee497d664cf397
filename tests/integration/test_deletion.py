"""Deletion (docs/operations.md#deletion) with a real redis-server, a real PostgreSQL archive, the API
and real worker processes: a run deleted with everything it left (its sub-agent, stream, tool records,
session entries, cached tool result, batch item, webhook state, archive rows) leaves nothing of itself
in any Redis key or archive table but its tombstone; a run deleted while its worker is paused
mid-tool-call is never written again by that worker, the archiver or a webhook delivery; a session's
deletion takes all its runs; a deletion by metadata deletes every matching run, with progress."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import orjson
import pytest
from redis.asyncio import Redis
from starlette.requests import Request
from starlette.responses import Response

from producer.scope import Scope
from shared.settings import Settings
from tests.integration.api_support import A, B, HookServer, api, settings, until_run
from tests.support.postgres_server import PostgresServer, binaries
from tests.support.procs import WorkerProc
from tests.support.waits import until

pytestmark = pytest.mark.integration
needs_pg = pytest.mark.skipif(binaries() is None, reason="no PostgreSQL binaries (initdb, pg_ctl) installed")

MARK = "zq-marker-7731"  # in a run's input and its cached tool result: nowhere once it is deleted
HOOK = "127.0.0.1"


def profiles(tmp_path: Path) -> str:
    scripted = {"kind": "scripted", "mode": "script"}
    helper = {"name": "helper", "tools": ["echo"], "provider": {**scripted, "script": [
        {"toolCalls": [{"name": "echo", "arguments": {"text": f"child {MARK}"}}]}, {"text": f"helped {MARK}"}]}}  # fmt: skip
    boss = {"name": "boss", "provider": scripted, "tools": ["echo", "sleep"],
            "toolSettings": {"echo": {"cache": {"ttlS": 600}}},
            "agentTools": [{"agent": "helper", "name": "ask_helper", "description": "a helper"}]}  # fmt: skip
    path = tmp_path / "profiles.json"
    path.write_bytes(orjson.dumps({"profiles": [boss, helper]}))
    return str(path)


def boss_run(script: list[dict[str, Any]], say: str = f"go {MARK}", **extra: Any) -> dict[str, Any]:
    return {"agent": "boss", "inputMessages": [{"role": "user", "content": say}],
            "runtimeHints": {"script": script}, **extra}  # fmt: skip


FULL = [
    {"toolCalls": [{"name": "echo", "arguments": {"text": MARK}}]},
    {"toolCalls": [{"name": "ask_helper", "arguments": {"task": f"help {MARK}"}}]},
    {"text": f"done {MARK}"},
]


async def redis_traces(redis: Redis, needles: list[str]) -> list[str]:
    """Every Redis key whose name or content holds one of ``needles`` (tombstones aside)."""
    found: list[str] = []
    async for raw in redis.scan_iter(count=1000):
        k = raw.decode()
        if ":gone:" in k:
            continue
        kind = (await redis.type(k)).decode()
        if kind == "string":
            body: Any = await redis.get(k)
        elif kind == "hash":
            body = await redis.hgetall(k)  # type: ignore[misc]
        elif kind == "list":
            body = await redis.lrange(k, 0, -1)  # type: ignore[misc]
        elif kind == "set":
            body = await redis.smembers(k)  # type: ignore[misc]
        elif kind == "zset":
            body = await redis.zrange(k, 0, -1)
        elif kind == "stream":
            body = await redis.xrange(k)
        else:
            body = b""
        blob = k + repr(body)
        found += [f"{k} ({n})" for n in needles if n in blob]
    return found


async def archive_traces(url: str, needles: list[str]) -> list[str]:
    """Every archive row (of every table) that holds one of ``needles``."""
    conn = await asyncpg.connect(url)
    try:
        tables = [
            r["tablename"]
            for r in await conn.fetch("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        ]
        found = []
        for t in tables:
            for row in await conn.fetch(f"SELECT t::text AS row FROM {t} t"):  # table names from the catalog
                found += [f"{t}: {n}" for n in needles if n in row["row"]]
        return found
    finally:
        await conn.close()


def key_of(run_id: str, tenant: str = "tenant-a") -> str:
    return Scope.of(Settings(), tenant).key(run_id)


def archive_env(pg: PostgresServer) -> dict[str, str]:
    return {
        "AGENTMILL_ARCHIVE_URL": pg.url,
        "AGENTMILL_LIVE_RETENTION_S": "600",
        "AGENTMILL_ARCHIVE_POLL_MS": "100",
    }


@needs_pg
async def test_a_deleted_run_leaves_nothing_but_its_tombstone_in_redis_and_the_archive(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    pg = PostgresServer()
    pg.start()
    hooks: list[bytes] = []

    async def hook(request: Request) -> Response:
        hooks.append(await request.body())
        return Response(status_code=500)  # its delivery is retried, until the run is deleted

    receiver = HookServer(hook)
    await receiver.start()
    path = profiles(tmp_path)
    s = settings(redis_url, archive_url=pg.url, profiles=path, webhook_allow_hosts=HOOK)
    w = WorkerProc(
        redis_url, env={"AGENTMILL_PROFILES": path, **archive_env(pg)}, log=tmp_path / "w.log"
    ).start()
    try:
        async with api(s) as base, httpx.AsyncClient(base_url=base, headers=A, timeout=30) as c:
            webhook = f"http://{HOOK}:{receiver.port}/hook"
            body = {"batchId": "b1", "runs": [
                # first: a later run of the session sees the deleted run's turn (docs: delete the session)
                boss_run([{"text": "kept"}], "go", runId="kept-1", sessionId="s1", autoCreateSession=True,
                         metadata={"endUser": "u-2"}),
                boss_run(FULL, runId="gone-1", sessionId="s1", webhook=webhook, metadata={"endUser": "u-1"}),
            ]}  # fmt: skip
            r = await c.post("/v1/runs/batch", json=body)
            assert r.status_code == 200, r.text
            for rid in ("gone-1", "kept-1"):
                await until_run(c, rid, lambda v: v["status"] == "completed", within=30)
            child = (await c.get("/v1/runs/gone-1")).json()["children"][0]["runId"]
            gone, kid = key_of("gone-1"), child
            await until("the runs archived", lambda: archive_count(pg.url, [gone]), 20)
            await until("a webhook attempt", lambda: _true(len(hooks) > 0), 20)
            # every family held something of the run before
            before = await redis_traces(redis, [gone, MARK])
            assert any(":tc:" in t for t in before) and any(":s.calls:" in t for t in before), before
            assert await archive_traces(pg.url, [gone, MARK])

            r = await c.delete("/v1/runs/gone-1")
            assert r.status_code == 200, r.text
            assert r.json()["runsDeleted"] >= 2 and not r.json()["alreadyDeleted"]
            n_hooks = len(hooks)
            await asyncio.sleep(2.5)  # an archiver pass, a webhook retry, the worker's beats
            traces = await redis_traces(redis, [gone, kid, MARK])
            assert traces == [], traces
            traces = await archive_traces(pg.url, [gone, kid, MARK])
            assert traces == [], traces
            assert await redis.exists(f"am:{{0}}:gone:{gone}") == 1
            assert len(hooks) <= n_hooks + 1  # at most the delivery already under way
            # the other run of the session and its batch item are still there
            assert (await c.get("/v1/runs/kept-1")).json()["status"] == "completed"
            session = (await c.get("/v1/sessions/s1")).json()
            assert session["runs"] == ["kept-1"] and "gone-1" not in str(session), session
            # a second DELETE answers from the tombstone; another tenant, an unknown run: 404
            again = (await c.delete("/v1/runs/gone-1")).json()
            assert again["alreadyDeleted"] and again["runsDeleted"] == 0
            assert (await c.delete("/v1/runs/gone-1", headers=B)).status_code == 404
            assert (await c.delete("/v1/runs/kept-1", headers=B)).status_code == 404
            assert (await c.delete("/v1/runs/nope")).status_code == 404
            assert (await c.get("/v1/runs/gone-1")).status_code == 404
            assert (await c.post("/v1/runs/gone-1/retry", json={})).status_code == 404
            # its id is not used again while the tombstone lasts
            r = await c.post("/v1/runs", json=boss_run([{"text": "again"}], runId="gone-1"))
            assert r.status_code == 409 and r.json()["error"]["code"] == "run_deleted"
            # the session's deletion takes its last run and the session
            r = await c.delete("/v1/sessions/s1")
            assert r.status_code == 200 and r.json()["runsDeleted"] == 1
            assert await redis_traces(redis, [key_of("kept-1"), key_of("s1")]) == []
            assert await archive_traces(pg.url, [key_of("kept-1")]) == []
            assert (await c.get("/v1/sessions/s1")).status_code == 404
            assert (await c.delete("/v1/sessions/s1")).status_code == 404
    finally:
        w.stop()
        await receiver.stop()
        pg.stop()


async def _true(v: bool) -> bool:
    return v


async def archive_count(url: str, key_ids: list[str]) -> bool:
    conn = await asyncpg.connect(url)
    try:
        return bool(await conn.fetchval("SELECT count(*) FROM runs WHERE key_id = ANY($1::text[])", key_ids))
    except asyncpg.UndefinedTableError:  # not migrated yet: no archiver pass so far
        return False
    finally:
        await conn.close()


@needs_pg
async def test_a_run_deleted_while_its_worker_is_paused_mid_tool_call_is_never_written_again(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    """The worker is SIGSTOPped while its tool call (sleep) runs; the run is deleted; on SIGCONT the
    call finishes and its commit is refused: no key, no archive row, no webhook state comes back."""
    from shared.archive.store import ArchiveStore

    pg = PostgresServer()
    pg.start()
    # The archive's schema first: the pause is meant mid-tool-call, not mid-way through the worker
    # creating a fresh database's tables (its migration holds them locked until it commits).
    migrated = ArchiveStore(pg.url)
    await migrated.pool()
    await migrated.aclose()
    seen: list[int] = []

    async def hook(request: Request) -> Response:
        seen.append(1)
        return Response(status_code=500)

    receiver = HookServer(hook)
    await receiver.start()
    path = profiles(tmp_path)
    s = settings(redis_url, archive_url=pg.url, profiles=path, webhook_allow_hosts=HOOK)
    w = WorkerProc(
        redis_url, env={"AGENTMILL_PROFILES": path, **archive_env(pg)}, log=tmp_path / "w.log"
    ).start()
    try:
        async with api(s) as base, httpx.AsyncClient(base_url=base, headers=A, timeout=30) as c:
            script = [{"toolCalls": [{"name": "sleep", "arguments": {"ms": 1500}}]}, {"text": f"late {MARK}"}]
            webhook = f"http://{HOOK}:{receiver.port}/hook"
            r = await c.post("/v1/runs", json=boss_run(script, runId="paused-1", webhook=webhook))
            assert r.status_code == 202, r.text
            k = key_of("paused-1")

            async def claimed() -> bool:
                return bool(await redis.hget(f"am:{{0}}:run:{k}", "claims"))

            await until("the sleep call claimed", claimed, 20, every=0.02)
            call_ends = time.monotonic() + 1.5
            w.signal(signal.SIGSTOP)
            try:
                r = await c.delete("/v1/runs/paused-1")
                assert r.status_code == 200, r.text
            finally:
                w.signal(signal.SIGCONT)
            log = tmp_path / "w.log"

            async def refused() -> bool:  # the worker found the run deleted and gave it up
                lines = log.read_text(errors="replace").splitlines()
                return any(f"run {k}: " in ln and "stopping without writing" in ln for ln in lines)

            await until("the paused worker giving the run up", refused, 20, every=0.05)
            # past the call's end, then two beats and ten archiver passes
            await asyncio.sleep(max(0.0, call_ends - time.monotonic()) + 1.0)
            assert await redis_traces(redis, [k, MARK]) == []
            assert await archive_traces(pg.url, [k, MARK]) == []
            assert seen == []
            assert w.alive
            # the worker goes on with other runs
            r = await c.post("/v1/runs", json=boss_run([{"text": "after"}], runId="after-1"))
            await until_run(c, "after-1", lambda v: v["status"] == "completed", within=20)
    finally:
        w.stop()
        await receiver.stop()
        pg.stop()


async def test_a_deletion_by_metadata_deletes_every_matching_run_with_progress(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    n, others = 300, 20
    s = settings(redis_url)
    env = {"AGENTMILL_DELETION_STEP": "40", "AGENTMILL_DELETION_PAUSE_MS": "5"}
    w = WorkerProc(redis_url, env=env, log=tmp_path / "w.log").start()
    try:
        async with api(s) as base, httpx.AsyncClient(base_url=base, headers=A, timeout=30) as c:
            runs = [{"agent": "scripted", "inputMessages": [{"role": "user", "content": MARK}],
                     "metadata": {"endUser": "u-9" if i < n else "u-8", "i": i}} for i in range(n + others)]  # fmt: skip
            r = await c.post("/v1/runs/batch", json={"runs": runs, "batchId": "many"})
            assert r.status_code == 200, r.text
            ids = [x["runId"] for x in r.json()["results"]]
            bad = await c.post("/v1/deletions", json={"metadata": {"endUser": {"nested": 1}}})
            assert bad.status_code == 422
            r = await c.post("/v1/deletions", json={"metadata": {"endUser": "u-9"}})
            assert r.status_code == 202, r.text
            did = r.json()["deletionId"]
            assert (await c.get(f"/v1/deletions/{did}", headers=B)).status_code == 404
            views: list[dict[str, Any]] = []

            async def done() -> bool:
                views.append((await c.get(f"/v1/deletions/{did}")).json())
                return bool(views[-1]["state"] == "done")

            await until("the deletion to finish", done, 60, every=0.05)
            last = views[-1]
            assert last["deleted"] == n and last["matched"] == n and last["finishedAt"], last
            progress = sorted({v["deleted"] for v in views})
            assert progress == sorted(progress) and len(progress) >= 2  # seen part way
            kept = [i for i in ids[n:] if (await c.get(f"/v1/runs/{i}")).status_code == 200]
            assert len(kept) == others
            assert [(await c.get(f"/v1/runs/{i}")).status_code for i in ids[:n:37]] == [404] * len(ids[:n:37])
            assert (await c.get("/v1/runs", params={"metadata": "endUser=u-9"})).json()["runs"] == []
    finally:
        w.stop()


@needs_pg
async def test_the_archiver_deletes_rows_it_wrote_after_the_run_was_deleted(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    """The deletion lands between the archiver's read of a run and its write: the rows it writes
    then are deleted again when it marks the batch (archive_done.lua names the deleted run)."""
    from producer.deletion import Eraser
    from shared.archive.archiver import Archiver
    from shared.archive.store import ArchivedRun, ArchiveStore
    from tests.integration.helpers import producer_for, wait_all

    pg = PostgresServer()
    pg.start()
    env = {"AGENTMILL_ARCHIVE_URL": pg.url, "AGENTMILL_WORKER_ARCHIVER": "false"}
    w = WorkerProc(redis_url, env=env, log=tmp_path / "w.log").start()
    p = producer_for(redis, redis_url, archive_url=pg.url)
    try:
        sub = await p.submit({"agent": "scripted", "inputMessages": [{"role": "user", "content": MARK}]})
        await wait_all(p, [sub.run_id], 20)
        eraser = Eraser(p)

        class DeletedMeanwhile(ArchiveStore):
            async def write(self, runs: Any) -> int:
                for r in runs:
                    assert isinstance(r, ArchivedRun)
                    await eraser.erase(r.key_id, r.tenant, "test", 1)
                return await super().write(runs)

        store = DeletedMeanwhile(pg.url)
        try:
            archiver = Archiver(p.parts, p.scripts, p.settings, store)
            assert await archiver.run_once() == 1
            assert archiver.archived == 1  # written, after the deletion
        finally:
            await store.aclose()
        assert await archive_traces(pg.url, [sub.run_id, MARK]) == []
        assert await redis_traces(redis, [sub.run_id, MARK]) == []
    finally:
        w.stop()
        if p.archive is not None:
            await p.archive.aclose()
        pg.stop()


async def test_the_cli_deletes_runs_sessions_and_by_metadata(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    """``agentmill runs delete``, ``sessions delete``, ``deletions create --wait``: straight to Redis
    and through the API."""
    from tests.support.cli import cli

    w = WorkerProc(redis_url, log=tmp_path / "w.log").start()
    try:
        async with (
            api(settings(redis_url)) as base,
            httpx.AsyncClient(base_url=base, headers=A, timeout=30) as c,
        ):

            async def submit(**kw: Any) -> None:
                r = await c.post(
                    "/v1/runs",
                    json={"agent": "scripted", "inputMessages": [{"role": "user", "content": "x"}], **kw},
                )
                assert r.status_code == 202, r.text
                await until_run(c, kw["runId"], lambda v: v["status"] == "completed", within=20)

            await submit(runId="c-1")
            await submit(runId="c-2", sessionId="cs", autoCreateSession=True)
            await submit(runId="c-3", metadata={"endUser": "u-7"})
            await submit(runId="c-4", metadata={"endUser": "u-7"})
            via = ["--api", base, "--token", "tok-a"]
            r = await asyncio.to_thread(cli, redis_url, "runs", "delete", "c-1", *via, "--json")
            assert r.returncode == 0 and orjson.loads(r.stdout)["runsDeleted"] == 1, r.stderr
            r = await asyncio.to_thread(cli, redis_url, "runs", "delete", "c-1", *via)
            assert r.returncode == 0 and "deleted before" in r.stdout, r.stdout + r.stderr
            r = await asyncio.to_thread(cli, redis_url, "runs", "delete", "nope", *via)
            assert r.returncode == 2
            r = await asyncio.to_thread(cli, redis_url, "sessions", "delete", "cs", "--tenant", "tenant-a")
            assert r.returncode == 0 and "1 runs" in r.stdout, r.stdout + r.stderr
            r = await asyncio.to_thread(
                cli, redis_url, "deletions", "create", "--metadata", "endUser=u-7", "--wait", "--json", *via
            )
            assert r.returncode == 0, r.stderr
            view = orjson.loads(r.stdout)
            assert view["state"] == "done" and view["deleted"] == 2, view
            for rid in ("c-1", "c-2", "c-3", "c-4"):
                assert (await c.get(f"/v1/runs/{rid}")).status_code == 404
    finally:
        w.stop()


async def test_runs_on_four_partitions_are_deleted_wherever_they_live(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    """Runs in sessions live at their session's partition, away from their id's home (which keeps a
    pointer): their deletion leaves nothing but tombstones on any partition."""
    env = {"AGENTMILL_PARTITIONS": "4"}
    w = WorkerProc(redis_url, env=env, log=tmp_path / "w.log").start()
    try:
        async with (
            api(settings(redis_url, partitions=4)) as base,
            httpx.AsyncClient(base_url=base, headers=A, timeout=30) as c,
        ):
            ids = [f"p-{i}" for i in range(12)]
            for i, rid in enumerate(ids):
                extra: dict[str, Any] = (
                    {"sessionId": f"ps-{i % 3}", "autoCreateSession": True} if i % 2 else {}
                )
                body = {
                    "agent": "scripted",
                    "runId": rid,
                    "inputMessages": [{"role": "user", "content": MARK}],
                }
                r = await c.post("/v1/runs", json={**body, **extra})
                assert r.status_code == 202, r.text
            for rid in ids:
                await until_run(c, rid, lambda v: v["status"] == "completed", within=30)
            for rid in ids:
                r = await c.delete(f"/v1/runs/{rid}")
                assert r.status_code == 200 and r.json()["runsDeleted"] == 1, r.text
            traces = await redis_traces(redis, [key_of(rid) for rid in ids] + [MARK])
            assert traces == [], traces
            r = await c.post("/v1/runs", json={**body, "runId": "p-3", "sessionId": "ps-0"})
            assert r.status_code == 409 and r.json()["error"]["code"] == "run_deleted", r.text
    finally:
        w.stop()


async def test_a_run_deleted_as_its_job_finishes_leaves_no_arq_result_behind(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    """A run's worker writes arq's result record (then clears the job's in-progress key) a moment after
    the run's ending. A deletion landing in that moment waits for the record, then deletes it too,
    rather than deleting first and leaving the late record behind for its minute."""
    from producer.deletion import Eraser
    from shared.keys import Partition
    from tests.integration.helpers import producer_for, wait_all

    w = WorkerProc(redis_url, log=tmp_path / "w.log").start()
    p = producer_for(redis, redis_url)
    try:
        sub = await p.submit({"agent": "scripted", "inputMessages": [{"role": "user", "content": MARK}]})
        await wait_all(p, [sub.run_id], 20)
    finally:
        w.stop()
    part: Partition = p.parts.parts[0]
    job = part.job_id(sub.run_id, 1)
    # The job as its worker still finishes it: in progress, no result record yet.
    await redis.set(part.in_progress_key(job), b"1", px=60_000)
    await redis.delete(part.job_result_prefix + job)
    erasing = asyncio.create_task(Eraser(p).erase(sub.run_id, "default", "test", 1))
    await asyncio.sleep(0.3)
    assert not erasing.done(), "deleted while its job was still being finished"
    # The worker's finish, in arq's order: the result record, then the in-progress key cleared.
    await redis.set(part.job_result_prefix + job, b"late", px=60_000)
    await redis.delete(part.in_progress_key(job))
    assert await asyncio.wait_for(erasing, 5) == 1
    assert await redis_traces(redis, [sub.run_id, MARK]) == []
