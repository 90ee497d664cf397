"""Batches and run listing through the HTTP API, a real Redis and a real worker."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import httpx
import orjson
import pytest
from redis.asyncio import Redis
from starlette.requests import Request
from starlette.responses import Response

from agentmill_client import limits
from producer.scope import Scope
from tests.integration.api_support import A, B, HookServer, api, key, run_body, settings, until_batch
from tests.integration.helpers import running_worker, until_status
from tests.support.schema import K

pytestmark = pytest.mark.integration
TERMINAL = ("completed", "failed", "aborted")


async def all_pages(c: httpx.AsyncClient, path: str, **params: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    cursor = None
    for _ in range(1000):
        q = {**params, **({"cursor": cursor} if cursor else {})}
        r = await c.get(path, params=q)
        assert r.status_code == 200, r.text
        out += r.json()["runs"]
        cursor = r.json()["next"]
        if cursor is None:
            return out
    raise AssertionError("the cursor never ended")


async def test_batch_counts_match_the_runs_real_statuses_after_a_mixed_batch(redis_url: str) -> None:
    received: list[tuple[dict[str, str], bytes]] = []

    async def hook(request: Request) -> Response:
        received.append((dict(request.headers), await request.body()))
        return Response(status_code=200)

    receiver = HookServer(hook, "/batch-done")
    port = receiver.port
    await receiver.start()
    approval = {"toolPolicy": {"requireApprovalByDefault": True}}
    runs = (
        [run_body([{"text": "fine"}]) for _ in range(4)]
        + [run_body([{"error": {"status": 400, "message": "bad request"}}]) for _ in range(3)]
        + [
            run_body([{"toolCalls": [{"name": "echo", "arguments": {"text": "x"}}]}], **approval)
            for _ in range(2)
        ]
        + [run_body([{"stall": True}])]
        + [{"inputMessages": []}]  # invalid: refused, not part of the batch
    )
    s = settings(redis_url, webhook_allow_hosts="127.0.0.1")
    try:
        async with api(s) as url, running_worker(redis_url), httpx.AsyncClient(base_url=url, headers=A) as c:
            r = await c.post("/v1/runs/batch", json={"runs": runs, "batchId": "nightly-1",
                                                      "batchWebhook": f"http://127.0.0.1:{port}/batch-done"})  # fmt: skip
            assert r.status_code == 200, r.text
            assert r.json()["batchId"] == "nightly-1"
            ids = [x["runId"] for x in r.json()["results"] if "runId" in x]
            assert len(ids) == 10 and "error" in r.json()["results"][-1]
            # Sending the same batch again creates nothing: its runs are named by (batch, index).
            again = await c.post("/v1/runs/batch", json={"runs": runs, "batchId": "nightly-1"})
            assert [x.get("runId") for x in again.json()["results"][:10]] == ids
            view = (await c.get("/v1/batches/nightly-1")).json()
            assert view["total"] == 10 and sum(view["counts"].values()) == 10

            view = await until_batch(
                c, "nightly-1", lambda v: v["counts"]["awaiting_human"] == 2 and v["counts"]["running"] == 1
                and v["done"] == 7,
            )  # fmt: skip
            assert view["counts"]["awaiting_human"] == 2 and view["counts"]["running"] == 1, view
            assert not view["finished"] and view["finishedAt"] is None and view["progress"] == 0.7
            assert received == []
            aborted = (await c.post("/v1/batches/nightly-1/abort")).json()
            assert (aborted["aborted"], aborted["requested"]) == (2, 1), aborted
            view = await until_batch(c, "nightly-1", lambda v: v["finished"])
            statuses = Counter([(await c.get(f"/v1/runs/{rid}")).json()["status"] for rid in ids])
            assert statuses == Counter({"completed": 4, "failed": 3, "aborted": 3})
            assert {k: v for k, v in view["counts"].items() if v} == dict(statuses)
            assert view["done"] == 10 and view["progress"] == 1.0 and view["finishedAt"] >= view["createdAt"]
            # The listing's rows carry what the console's runs table shows: duration (created →
            # finished), iterations and the error code, as each run's own result states them.
            page = (await c.get("/v1/batches/nightly-1/runs", params={"limit": 20})).json()["runs"]
            assert sorted(r["runId"] for r in page) == sorted(ids)
            for row in page:
                result = (await c.get(f"/v1/runs/{row['runId']}")).json()["result"]
                assert row["finishedAt"] >= row["createdAt"]
                assert row["iterations"] == result["iterations"], (row, result)
                if row["status"] == "completed":  # a retried error it got past is not its ending
                    assert row["errorCode"] is None, (row, result)
                else:
                    assert row["errorCode"] == result["lastError"]["code"], (row, result)

            listed = await all_pages(c, "/v1/batches/nightly-1/runs", limit=3)
            assert sorted(x["runId"] for x in listed) == sorted(ids)
            assert Counter(x["status"] for x in listed) == statuses
            assert all(x["batchId"] == "nightly-1" for x in listed)
            failed = await all_pages(c, "/v1/batches/nightly-1/runs", status="failed")
            assert len(failed) == 3
            assert (await c.get("/v1/batches/nightly-2")).status_code == 404

            for _ in range(100):
                if received:
                    break
                await asyncio.sleep(0.1)
            await asyncio.sleep(0.3)
            assert len(received) == 1  # once, when the last run ended
            headers, body = received[0]
            assert headers["x-agentmill-delivery"] == Scope.of(s, "tenant-a").batch_delivery("nightly-1")
            sent = orjson.loads(body)
            assert sent["batchId"] == "nightly-1" and sent["finished"] and sent["counts"]["aborted"] == 3
    finally:
        await receiver.stop()


async def test_a_batch_sent_in_parts_finishes_and_fires_its_webhook_once(redis_url: str) -> None:
    """Every run of part 1 (more: true) ends before part 2 arrives: the batch is not finished and its
    webhook waits. It fires once, after the last part's runs ended, counting every run. A finished
    batch takes no new runs; sending a part again still answers its runs. A batch whose runs all
    ended is finished by the request that closes it, even one that creates nothing."""
    received: list[bytes] = []

    async def hook(request: Request) -> Response:
        received.append(await request.body())
        return Response(status_code=204)

    receiver = HookServer(hook)
    port = receiver.port
    await receiver.start()
    hook_url = f"http://127.0.0.1:{port}/hook"

    async def until_received(n: int) -> None:
        for _ in range(100):
            if len(received) >= n:
                break
            await asyncio.sleep(0.1)
        await asyncio.sleep(0.5)  # and nothing more comes

    s = settings(redis_url, webhook_allow_hosts="127.0.0.1")
    try:
        async with api(s) as url, running_worker(redis_url), httpx.AsyncClient(base_url=url, headers=A) as c:
            part1 = [run_body([{"text": "one"}]) for _ in range(3)]
            part2 = [run_body([{"text": "two"}]) for _ in range(2)]
            r = await c.post("/v1/runs/batch", json={"runs": part1, "batchId": "parts-1", "more": True,
                                                      "batchWebhook": hook_url})  # fmt: skip
            assert r.status_code == 200, r.text
            view = await until_batch(c, "parts-1", lambda v: v["done"] == 3)
            assert view["done"] == view["total"] == 3 and not view["finished"] and view["finishedAt"] is None
            await asyncio.sleep(1.5)  # three passes of the API's webhook deliverer (every 0.5 s)
            assert received == []  # not finished: more parts were announced
            r = await c.post("/v1/runs/batch", json={"runs": part2, "batchId": "parts-1", "offset": 3})
            assert r.status_code == 200, r.text
            view = await until_batch(c, "parts-1", lambda v: v["finished"])
            assert view["finished"] and view["total"] == view["done"] == 5 and view["finishedAt"]
            await until_received(1)
            assert len(received) == 1
            sent = orjson.loads(received[0])
            assert sent["batchId"] == "parts-1" and sent["total"] == 5 and sent["finished"]
            late = await c.post("/v1/runs/batch", json={"runs": [run_body([{"text": "late"}])],
                                                         "batchId": "parts-1", "offset": 5})  # fmt: skip
            assert late.json()["results"][0]["error"]["code"] == "batch_finished", late.text
            again = await c.post("/v1/runs/batch", json={"runs": part2, "batchId": "parts-1", "offset": 3})
            assert [x["status"] for x in again.json()["results"]] == ["completed", "completed"], again.text
            assert (await c.get("/v1/batches/parts-1")).json()["total"] == 5

            r = await c.post("/v1/runs/batch", json={"runs": part1, "batchId": "parts-2", "more": True,
                                                      "batchWebhook": hook_url})  # fmt: skip
            await until_batch(c, "parts-2", lambda v: v["done"] == 3)
            assert not (await c.get("/v1/batches/parts-2")).json()["finished"]
            r = await c.post("/v1/runs/batch", json={"runs": part1, "batchId": "parts-2"})  # creates nothing
            assert (await c.get("/v1/batches/parts-2")).json()["finished"]
            await until_received(2)
            assert len(received) == 2 and orjson.loads(received[1])["batchId"] == "parts-2"
    finally:
        await receiver.stop()


async def test_a_tenant_never_sees_another_tenants_runs_or_batches(redis_url: str) -> None:
    async with (
        api(settings(redis_url)) as url,
        httpx.AsyncClient(base_url=url, headers=A) as a,
        httpx.AsyncClient(base_url=url, headers=B) as b,
    ):
        meta = {"metadata": {"team": "red"}}
        ra = await a.post(
            "/v1/runs/batch", json={"runs": [run_body(**meta) for _ in range(3)], "batchId": "same"}
        )
        rb = await b.post(
            "/v1/runs/batch", json={"runs": [run_body(**meta) for _ in range(2)], "batchId": "same"}
        )
        ids_a = {x["runId"] for x in ra.json()["results"]}
        ids_b = {x["runId"] for x in rb.json()["results"]}
        sa = (await a.post("/v1/runs", json=run_body(sessionId="ses-a", autoCreateSession=True))).json()[
            "runId"
        ]
        ids_a.add(sa)
        assert not ids_a & ids_b
        assert (await a.get("/v1/batches/same")).json()["total"] == 3
        assert (await b.get("/v1/batches/same")).json()["total"] == 2
        for client, own, other in ((a, ids_a, ids_b), (b, ids_b, ids_a)):
            for params in ({}, {"batchId": "same"}, {"status": "queued"}, {"agent": "scripted"},
                           {"metadata": "team=red"}, {"createdAfter": 0}):  # fmt: skip
                seen = {x["runId"] for x in await all_pages(client, "/v1/runs", **params)}
                assert seen <= own and not seen & other, params
            seen = {x["runId"] for x in await all_pages(client, "/v1/batches/same/runs")}
            assert seen and seen <= own
        assert (await b.get("/v1/runs", params={"sessionId": "ses-a"})).json()["runs"] == []
        assert (await b.post("/v1/batches/bat-of-a/abort")).status_code == 404
        await a.post("/v1/runs/batch", json={"runs": [run_body()], "batchId": "only-a"})
        assert (await b.get("/v1/batches/only-a")).status_code == 404
        assert (await b.get("/v1/batches/only-a/runs")).status_code == 404
        assert (await b.post("/v1/batches/only-a/abort")).status_code == 404
        assert (await a.get("/v1/runs")).status_code == 200
        assert (await a.get("/v1/runs", headers={"Authorization": "Bearer nope"})).status_code == 401


async def test_filters_and_cursors_stable_under_concurrent_inserts(redis_url: str) -> None:
    async with api(settings(redis_url)) as url, httpx.AsyncClient(base_url=url, headers=A) as c:
        first = [run_body(metadata={"n": i, "even": i % 2 == 0}) for i in range(60)]
        for i in range(0, 60, 20):  # three batches, so createdAt differs between some and ties within
            await c.post("/v1/runs/batch", json={"runs": first[i : i + 20]})
            await asyncio.sleep(0.005)
        original = await all_pages(c, "/v1/runs", limit=100)
        assert len(original) == 60
        assert [x["createdAt"] for x in original] == sorted((x["createdAt"] for x in original), reverse=True)

        stop = asyncio.Event()

        async def insert() -> None:
            while not stop.is_set():
                await c.post("/v1/runs/batch", json={"runs": [run_body() for _ in range(5)]})
                await c.post("/v1/runs", json=run_body())

        writer = asyncio.create_task(insert())
        try:
            seen: list[str] = []
            cursor = None
            while True:
                page = (
                    await c.get("/v1/runs", params={"limit": 7, **({"cursor": cursor} if cursor else {})})
                ).json()
                seen += [x["runId"] for x in page["runs"]]
                cursor = page["next"]
                await asyncio.sleep(0.01)  # let the writer insert between pages
                if cursor is None:
                    break
        finally:
            stop.set()
            await writer
        assert len(seen) == len(set(seen)), "a run was listed twice"
        old = [x["runId"] for x in original]
        assert [r for r in seen if r in set(old)] == old, "the original runs, each once, in order"

        evens = await all_pages(c, "/v1/runs", metadata="even=true", limit=9)
        assert len(evens) == 30
        assert len(await all_pages(c, "/v1/runs", metadata=["even=true", "n=4"])) == 1
        assert len(await all_pages(c, "/v1/runs", metadata="n=4", agent="scripted", status="queued")) == 1
        assert await all_pages(c, "/v1/runs", metadata="n=4", status="running") == []
        mid = original[30]["createdAt"]
        older = await all_pages(c, "/v1/runs", createdBefore=mid)
        assert older and all(x["createdAt"] < mid for x in older)
        assert {x["runId"] for x in older} == {x["runId"] for x in original if x["createdAt"] < mid}
        newer = await all_pages(c, "/v1/runs", createdAfter=mid, batchId=original[0]["batchId"])
        assert newer and all(x["createdAt"] > mid and x["batchId"] == original[0]["batchId"] for x in newer)
        bad = await c.get("/v1/runs", params={"cursor": "not-a-cursor"})
        assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_cursor"
        bad = await c.get("/v1/runs", params={"status": "sleeping"})
        assert bad.status_code == 422 and "status" in bad.json()["error"]["message"]
        bad = await c.get("/v1/runs", params={"metadata": "no-equals"})
        assert bad.status_code == 422


async def test_indexes_are_bounded_and_expire_with_the_retention(
    redis_url: str, redis: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(limits, "MAX_INDEX_RUNS", 5)
    s = settings(redis_url, retention_s=2)
    async with (
        api(s) as url,
        running_worker(redis_url, retention_s=2),
        httpx.AsyncClient(base_url=url, headers=A) as c,
    ):
        r = await c.post("/v1/runs/batch", json={"runs": [run_body() for _ in range(8)], "batchId": "short"})
        ids = [x["runId"] for x in r.json()["results"]]
        for rid in ids:
            await until_status(redis, key(rid), "completed")
        index_keys = [k.decode() async for k in redis.scan_iter(match=K.index_key("tenant-a", "*") + "*")]
        assert (
            K.index_key("tenant-a", "all") in index_keys
            and K.index_key("tenant-a", "batch", "short") in index_keys
        )
        for k in index_keys:
            assert 0 < await redis.ttl(k) <= 2, k
            assert await redis.zcard(k) <= 5, k  # trimmed to the newest MAX_INDEX_RUNS
        assert 0 < await redis.ttl(K.batch("tenant-a", "short")) <= 2
        assert len(await all_pages(c, "/v1/runs")) == 5
        await asyncio.sleep(3.2)
        assert [k async for k in redis.scan_iter(match=K.index_key("tenant-a", "*") + "*")] == []
        assert (await c.get("/v1/batches/short")).status_code == 404
        assert (await c.get("/v1/runs")).json() == {"runs": [], "next": None}


async def test_chunked_submission_keeps_order_and_survives_a_flushed_script_cache(
    redis_url: str, redis: Redis
) -> None:
    from producer.batch_submit import SUBMIT_CHUNK
    from producer.service import Submitted
    from tests.integration.helpers import producer_for, script_run

    p = producer_for(redis, redis_url)
    n = 2 * SUBMIT_CHUNK + 7
    items = [
        script_run([{"text": "x"}], sessionId="one", autoCreateSession=True, metadata={"i": i})
        for i in range(n)
    ]
    first = await p.submit_many(items[:SUBMIT_CHUNK])
    await redis.script_flush()  # Redis restarted meanwhile: the next call meets NOSCRIPT
    rest = await p.submit_many(items[SUBMIT_CHUNK:], batch_id="b1")
    subs = first + rest
    assert all(isinstance(s, Submitted) and s.created for s in subs)
    ids = [s.run_id for s in subs if isinstance(s, Submitted)]
    assert [r.decode() for r in await redis.lrange(K.session_runs("one"), 0, -1)] == ids
    assert int(await redis.hget(K.batch("default", "b1"), "total")) == n - SUBMIT_CHUNK


async def test_cli_and_client_find_runs_and_follow_batches(redis_url: str, tmp_path: Any) -> None:

    from agentmill_client.client import AsyncClient
    from tests.support.cli import cli

    s = settings(redis_url)
    token = {"AGENTMILL_TOKEN": "tok-a"}
    jsonl = tmp_path / "runs.jsonl"
    jsonl.write_text(
        "\n".join(orjson.dumps(run_body([{"text": f"r{i}"}], metadata={"i": i})).decode() for i in range(5))
    )
    async with api(s) as url, running_worker(redis_url):
        # Three runs a request: the file goes in two parts of one batch; --wait follows the batch.
        out = await asyncio.to_thread(cli, redis_url, "submit", str(jsonl), "--wait", "--api", url,
                                      env={**token, "AGENTMILL_MAX_BATCH": "3"})  # fmt: skip
        assert out.returncode == 0, out.stdout + out.stderr
        # stdout holds data (the batch id, then the run ids); the summary goes to stderr.
        batch_id = out.stdout.split()[0]
        assert f"batch {batch_id}: accepted 5, rejected 0" in out.stderr, out.stderr
        assert len(out.stdout.split()) == 6
        status = await asyncio.to_thread(cli, redis_url, "batch", "status", batch_id, "--api", url, env=token)
        assert (
            status.returncode == 0
            and "finished, 5/5 ended (100%)" in status.stdout
            and "5 completed" in status.stdout
        )
        direct = await asyncio.to_thread(cli, redis_url, "batch", "status", batch_id, "--tenant", "tenant-a")
        assert direct.returncode == 0 and "5/5 ended" in direct.stdout
        other = await asyncio.to_thread(cli, redis_url, "batch", "status", batch_id)  # tenant "default"
        assert other.returncode == 2 and f"no batch {batch_id}" in other.stderr
        ls = await asyncio.to_thread(cli, redis_url, "runs", "ls", "--batch", batch_id, "--meta", "i=3", "--json",
                                     "--api", url, env=token)  # fmt: skip
        rows = [orjson.loads(line) for line in ls.stdout.splitlines() if line.strip()]
        assert ls.returncode == 0 and len(rows) == 1 and rows[0]["status"] == "completed"
        ls = await asyncio.to_thread(
            cli, redis_url, "runs", "ls", "--status", "completed", "--tenant", "tenant-a"
        )
        assert ls.returncode == 0 and "5 run(s)" in ls.stdout and batch_id in ls.stdout
        bad = await asyncio.to_thread(cli, redis_url, "runs", "ls", "--status", "nope")
        assert bad.returncode == 2 and "status" in bad.stderr

        async with AsyncClient(url, token="tok-a") as c:
            parked = await c.create_batch(
                [run_body([{"toolCalls": [{"name": "echo", "arguments": {}}]}],
                          toolPolicy={"requireApprovalByDefault": True}) for _ in range(3)],
                batch_id="parked",
            )  # fmt: skip
            assert parked.batch_id == "parked" and all(r.run_id for r in parked.results)
            page = await c.list_runs(metadata={"i": 2}, limit=10)
            assert len(page.runs) == 1 and page.runs[0].batch_id == batch_id and page.next is None
            assert len([r async for r in c.iter_runs(batch_id=batch_id, limit=2)]) == 5
            for _ in range(100):
                if (await c.get_batch("parked")).counts["awaiting_human"] == 3:
                    break
                await asyncio.sleep(0.1)
            assert (await c.abort_batch("parked")).aborted == 3
            view = await c.get_batch("parked")
            assert view.finished and view.counts["aborted"] == 3
            assert {r.status for r in (await c.batch_runs("parked")).runs} == {"aborted"}


async def test_console_files_are_served_under_a_strict_csp_without_weakening_auth(redis_url: str) -> None:
    import re

    async with api(settings(redis_url)) as url, httpx.AsyncClient(base_url=url) as c:
        page = await c.get("/ui")
        csp = page.headers["content-security-policy"]
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert "default-src 'none'" in csp and "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
        assert "unsafe" not in csp and page.headers["x-content-type-options"] == "nosniff"
        html = page.text
        assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", html), (
            "an inline script would need 'unsafe-inline'"
        )
        assert " style=" not in html and not re.search(r"\son\w+=", html), "inline styles and handlers too"
        js = await c.get("/ui/app.js")
        assert js.status_code == 200 and js.headers["content-type"].startswith("text/javascript")
        assert "innerHTML" not in js.text and "eval(" not in js.text
        assert (await c.get("/ui/app.css")).headers["content-security-policy"] == csp
        assert (await c.get("/ui/../app.py")).status_code == 404
        assert (await c.get("/ui/secrets.txt")).status_code == 404
        # The page is public; every API call it makes still needs the token.
        assert (await c.get("/v1/runs")).status_code == 401
        assert (await c.get("/v1/batches/x")).status_code == 401
        assert "/ui" not in (await c.get("/openapi.json")).json()["paths"]


async def test_a_session_id_another_tenant_holds_lists_the_callers_own_runs(redis_url: str) -> None:
    async with (
        api(settings(redis_url)) as url,
        httpx.AsyncClient(base_url=url, headers=A) as a,
        httpx.AsyncClient(base_url=url, headers=B) as b,
    ):
        ra = (await a.post("/v1/runs", json=run_body(sessionId="shared", autoCreateSession=True))).json()[
            "runId"
        ]
        rb = (await b.post("/v1/runs", json=run_body(sessionId="shared", autoCreateSession=True))).json()[
            "runId"
        ]
        assert [x["runId"] for x in await all_pages(a, "/v1/runs", sessionId="shared")] == [ra]
        assert [x["runId"] for x in await all_pages(b, "/v1/runs", sessionId="shared")] == [rb]
