"""Bad input is a 4xx, never a 5xx or a stuck run; a crashed effect fails its run."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import orjson
import pytest
from redis.asyncio import Redis
from starlette.requests import Request
from starlette.responses import Response

from agentmill_client import limits
from producer.scope import Scope
from tests.integration.api_support import A, B, HookServer, api, body, settings
from tests.integration.helpers import producer_for, running_worker, script_run, wait_all
from tests.support.schema import K

pytestmark = pytest.mark.integration


async def test_an_event_seq_past_the_stream_id_range_is_a_422(redis_url: str) -> None:
    async with api(settings(redis_url)) as url, httpx.AsyncClient(base_url=url, headers=A) as c:
        rid = (await c.post("/v1/runs", json=body())).json()["runId"]
        huge = str(2**64 + 5)
        for params in ({"format": "json"}, {}):  # the JSON page and the SSE stream
            r = await c.get(f"/v1/runs/{rid}/events", params={**params, "after": huge})
            assert r.status_code == 422 and r.json()["error"]["field"] == "after", r.text
            r = await c.get(f"/v1/runs/{rid}/events", params=params, headers={"Last-Event-ID": huge})
            assert r.status_code == 422 and "Last-Event-ID" in r.json()["error"]["message"], r.text
        ok = await c.get(f"/v1/runs/{rid}/events", params={"format": "json", "after": limits.MAX_SEQ})
        assert ok.status_code == 200 and ok.json()["events"] == []


async def test_a_last_event_id_that_is_not_a_seq_is_a_422_not_a_full_replay(redis_url: str) -> None:
    async with api(settings(redis_url)) as url, httpx.AsyncClient(base_url=url, headers=A) as c:
        rid = (await c.post("/v1/runs", json=body())).json()["runId"]
        for params in ({"format": "json"}, {}):  # the JSON page and the SSE stream
            for bad in ("abc", "-1", "1.5", "0x10"):
                r = await c.get(f"/v1/runs/{rid}/events", params=params, headers={"Last-Event-ID": bad})
                assert r.status_code == 422, (bad, r.text)
                assert r.json()["error"]["code"] == "invalid_input" and "Last-Event-ID" in r.text
        # Absent or empty: from the start, as without ?after.
        for headers in ({}, {"Last-Event-ID": ""}):
            r = await c.get(f"/v1/runs/{rid}/events", params={"format": "json"}, headers=headers)
            assert r.status_code == 200 and r.json()["next"] == 0, r.text


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity"])
async def test_nan_and_infinity_in_maps_are_a_422(redis_url: str, number: str) -> None:
    raw = b'{"agent": "scripted", "inputMessages": [{"role": "user", "content": "go"}], "metadata": {"x": [%s]}}'
    async with api(settings(redis_url)) as url, httpx.AsyncClient(base_url=url, headers=A) as c:
        r = await c.post(
            "/v1/runs", content=raw % number.encode(), headers={"Content-Type": "application/json"}
        )
        assert r.status_code == 422 and r.json()["error"]["field"] == "metadata", r.text
        r = await c.post(
            "/v1/runs/batch",
            content=b'{"runs": [%s]}' % (raw % number.encode()),
            headers={"Content-Type": "application/json"},
        )
        assert r.status_code == 200 and r.json()["results"][0]["error"]["field"] == "runs.0.metadata"


async def test_a_slow_body_gets_408_and_slow_headers_lose_the_connection(redis_url: str) -> None:
    s = settings(redis_url, body_timeout_s=0.5, header_timeout_s=0.5)
    async with api(s) as url:
        port = int(url.rsplit(":", 1)[1])
        # The body: headers promise 100 bytes, 10 arrive, then nothing.
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(
            b"POST /v1/runs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tok-a\r\n"
            b'Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"agent":'
        )
        await writer.drain()
        t0 = time.monotonic()
        answer = await asyncio.wait_for(reader.read(4096), 5)
        assert answer.startswith(b"HTTP/1.1 408") and b"request_timeout" in answer, answer
        assert time.monotonic() - t0 < 3
        writer.close()
        # The headers: one byte every 0.1 s would go on forever; the connection is closed instead.
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        t0 = time.monotonic()
        closed = False
        for ch in b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 100:
            try:
                writer.write(bytes([ch]))
                await writer.drain()
                data = await asyncio.wait_for(reader.read(100), 0.1)
            except TimeoutError:
                continue
            except ConnectionError:
                data = b""
            if data == b"":
                closed = True
                break
        assert closed and time.monotonic() - t0 < 3
        writer.close()
        # An ordinary request on a fresh connection is unaffected.
        async with httpx.AsyncClient(base_url=url) as c:
            assert (await c.get("/healthz")).status_code == 200


async def test_a_model_reply_over_the_message_bound_fails_the_run(redis: Redis, redis_url: str) -> None:
    # echoContext answers with the messages it was given: two 60k messages make a reply over
    # MAX_MESSAGE_CHARS, which Message refuses. The run must fail with a reason, not stay running.
    p = producer_for(redis, redis_url)
    big = "x" * 60_000
    run = script_run([{"echoContext": True}])
    run["inputMessages"] = [{"role": "user", "content": big}, {"role": "user", "content": big}]
    sub = await p.submit(run)
    async with running_worker(redis_url):
        rec = (await wait_all(p, [sub.run_id], 30))[sub.run_id]
    assert rec.status.value == "failed"
    assert rec.result is not None and rec.result.last_error is not None
    assert rec.result.last_error.code == "model_invalid"
    assert "not a valid message" in rec.result.last_error.message


async def test_an_effect_that_crashes_fails_its_run_with_last_error(redis: Redis, redis_url: str) -> None:
    # A session whose stored history is corrupt: loading the context raises inside the effect.
    p = producer_for(redis, redis_url)
    first = await p.submit(script_run([{"text": "one"}], sessionId="s-corrupt", autoCreateSession=True))
    async with running_worker(redis_url):
        await wait_all(p, [first.run_id], 30)
        await redis.rpush(K.session_loops("s-corrupt"), b"{not json")
        sub = await p.submit(script_run([{"text": "two"}], sessionId="s-corrupt"))
        rec = (await wait_all(p, [sub.run_id], 30))[sub.run_id]
    assert rec.status.value == "failed", rec
    assert rec.result is not None and rec.result.last_error is not None
    assert rec.result.last_error.code == "internal"
    events = await redis.xrange(K.events(sub.run_id))
    last = orjson.loads(events[-1][1][b"payload"])
    assert last["status"] == "failed" and last["error"]["code"] == "internal"


async def test_a_tenants_800_streams_leave_other_tenants_fast_and_the_api_ready(redis_url: str) -> None:
    # Tenant B opens 800 event streams on its queued run: the first 100 (its cap) stay open,
    # blocking in XREAD on the API's stream pool; the rest get 429. Tenant A's reads stay fast,
    # /readyz stays 200, and the process cap (120) holds for A too.
    s = settings(redis_url, max_streams_per_tenant=100, max_streams=120)
    limits_ = httpx.Limits(max_connections=1000, max_keepalive_connections=0)
    async with (
        api(s) as url,
        httpx.AsyncClient(base_url=url, headers=B, limits=limits_, timeout=30) as cb,
        httpx.AsyncClient(base_url=url, headers=A, timeout=30) as ca,
    ):
        rid_b = (await cb.post("/v1/runs", json=body())).json()["runId"]
        rid_a = (await ca.post("/v1/runs", json=body())).json()["runId"]
        open_streams: list[httpx.Response] = []
        statuses: list[int] = []

        async def open_one() -> None:
            req = cb.build_request("GET", f"/v1/runs/{rid_b}/events")
            resp = await cb.send(req, stream=True)
            statuses.append(resp.status_code)
            if resp.status_code == 200:
                open_streams.append(resp)
            else:
                assert resp.headers["retry-after"] and (await resp.aread())
                assert orjson.loads(resp.content)["error"]["code"] == "too_many_streams"
                await resp.aclose()

        try:
            await asyncio.gather(*(open_one() for _ in range(800)))
            assert statuses.count(200) == 100 and statuses.count(429) == 700
            timings = []
            for _ in range(5):
                t0 = time.perf_counter()
                r = await ca.get(f"/v1/runs/{rid_a}")
                timings.append(time.perf_counter() - t0)
                assert r.status_code == 200
            assert sorted(timings)[2] < 0.1, timings
            assert (await ca.get("/readyz")).status_code == 200
            assert (await ca.post("/v1/runs", json=body())).status_code == 202
            # The process cap: A may open 20 more, not 21.
            a_streams = [await ca.send(ca.build_request("GET", f"/v1/runs/{rid_a}/events"), stream=True)
                         for _ in range(21)]  # fmt: skip
            assert [r.status_code for r in a_streams].count(200) == 20 and a_streams[-1].status_code == 429
            for r in a_streams:
                await r.aclose()
            deadline = time.monotonic() + 3
            while (
                poll := await ca.get(f"/v1/runs/{rid_a}/wait", params={"timeout": 0.1})
            ).status_code == 429:
                assert time.monotonic() < deadline, "the slots of closed streams never came back"
                await asyncio.sleep(0.05)
            assert poll.status_code == 200
        finally:
            for r in open_streams:
                await r.aclose()


async def test_a_body_that_is_not_json_is_a_422(redis_url: str) -> None:
    async with api(settings(redis_url)) as url, httpx.AsyncClient(base_url=url, headers=A) as c:
        rid = (await c.post("/v1/runs", json=body())).json()["runId"]
        for path in ("/v1/runs", f"/v1/runs/{rid}/approvals", "/v1/runs/batch"):
            r = await c.post(path, content=b"\xfe\xca\xb3\xffH", headers={"Content-Type": "application/json"})
            assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_input", (path, r.text)


async def test_another_tenants_run_id_answers_like_a_free_one_and_cannot_be_squatted(
    redis_url: str, redis: Redis
) -> None:
    def said(text: str, **kw: Any) -> dict[str, Any]:
        return body(runtimeHints={"script": [{"text": text}]}, **kw)

    async with (
        api(settings(redis_url)) as url,
        httpx.AsyncClient(base_url=url, headers=A) as ca,
        httpx.AsyncClient(base_url=url, headers=B) as cb,
        running_worker(redis_url),
    ):
        # A holds "shared-1"; B submitting it gets 202 (not 409) and a run of its own.
        assert (await ca.post("/v1/runs", json=said("from A", runId="shared-1"))).status_code == 202
        r = await cb.post("/v1/runs", json=said("from B", runId="shared-1"))
        assert r.status_code == 202 and r.json()["runId"] == "shared-1", r.text
        assert (await cb.post("/v1/runs", json=said("from B", runId="shared-1"))).status_code == 200
        # B holds "early-1" before A uses it: A still gets it.
        assert (await cb.post("/v1/runs", json=said("squat", runId="early-1"))).status_code == 202
        assert (await ca.post("/v1/runs", json=said("mine", runId="early-1"))).status_code == 202
        # A run only A has is unknown to B, exactly like a free id.
        assert (await ca.post("/v1/runs", json=said("only A", runId="a-only"))).status_code == 202
        for path in ("/v1/runs/a-only", "/v1/runs/a-only/events?format=json", "/v1/runs/free-9"):
            got = await cb.get(path)
            assert got.status_code == 404 and got.json()["error"]["code"] == "unknown_run", path
        assert (await cb.post("/v1/runs/a-only/abort")).status_code == 404
        answers = {}
        for who, c in (("A", ca), ("B", cb)):
            for rid in ("shared-1", "early-1"):
                v = (await c.get(f"/v1/runs/{rid}/wait", params={"timeout": 20})).json()
                assert v["runId"] == rid and v["result"]["runId"] == rid
                answers[who, rid] = v["result"]["finalAssistantMessage"]["content"]
                page = (await c.get(f"/v1/runs/{rid}/events", params={"format": "json"})).json()
                assert page["events"] and {e["runId"] for e in page["events"]} == {rid}
        assert answers == {("A", "shared-1"): "from A", ("B", "shared-1"): "from B",
                           ("A", "early-1"): "mine", ("B", "early-1"): "squat"}  # fmt: skip
        # Sessions likewise: B's "ses-1" is its own, though A created one first.
        await ca.post("/v1/runs", json=said("a", sessionId="ses-1", autoCreateSession=True))
        r = await cb.post("/v1/runs", json=said("b", sessionId="ses-1", autoCreateSession=True))
        assert r.status_code == 202, r.text
        sa = (await ca.get("/v1/sessions/ses-1")).json()
        sb = (await cb.get("/v1/sessions/ses-1")).json()
        assert sb["sessionId"] == "ses-1" and len(sa["runs"]) == len(sb["runs"]) == 1
        assert sa["runs"] != sb["runs"]


async def test_a_scoped_run_shows_the_id_its_client_chose(redis_url: str, redis: Redis) -> None:
    """B's runs kept under tenant-scoped ids (A holds the ids) show B's own ids in the run listing,
    its batch's run page, its session's run list and its webhook; the keys use the scoped id."""
    received: list[bytes] = []

    async def hook(request: Request) -> Response:
        received.append(await request.body())
        return Response(status_code=204)

    receiver = HookServer(hook)
    port = receiver.port
    await receiver.start()

    def said(text: str, **kw: Any) -> dict[str, Any]:
        return body(runtimeHints={"script": [{"text": text}]}, **kw)

    try:
        async with (
            api(settings(redis_url, webhook_allow_hosts="127.0.0.1")) as url,
            httpx.AsyncClient(base_url=url, headers=A) as ca,
            httpx.AsyncClient(base_url=url, headers=B) as cb,
            running_worker(redis_url),
        ):
            for rid in ("same", "same-s", "same-b"):
                assert (await ca.post("/v1/runs", json=said("A", runId=rid))).status_code == 202
            hook_url = f"http://127.0.0.1:{port}/hook"
            assert (
                await cb.post("/v1/runs", json=said("B", runId="same", webhook=hook_url))
            ).status_code == 202
            r = await cb.post(
                "/v1/runs", json=said("B", runId="same-s", sessionId="ses-b", autoCreateSession=True)
            )
            assert r.status_code == 202, r.text
            r = await cb.post(
                "/v1/runs/batch", json={"runs": [said("B", runId="same-b"), said("B")], "batchId": "bb"}
            )
            assert r.status_code == 200 and r.json()["results"][0]["runId"] == "same-b", r.text
            key = Scope.of(settings(redis_url), "tenant-b").key("same")
            assert await redis.hget(K.run(key), "tenant") == b"tenant-b"
            for rid in ("same", "same-s", "same-b"):
                v = (await cb.get(f"/v1/runs/{rid}/wait", params={"timeout": 20})).json()
                assert v["status"] == "completed" and v["runId"] == rid, v
            listed = [x["runId"] for x in (await cb.get("/v1/runs")).json()["runs"]]
            assert len(listed) == 4 and {"same", "same-s", "same-b"} <= set(listed), listed
            assert not any(x.startswith("tsc_") for x in listed)
            in_batch = [x["runId"] for x in (await cb.get("/v1/batches/bb/runs")).json()["runs"]]
            assert len(in_batch) == 2 and "same-b" in in_batch, in_batch
            assert (await cb.get("/v1/batches/bb")).json()["total"] == 2
            assert (await cb.get("/v1/sessions/ses-b")).json()["runs"] == ["same-s"]
            assert [x["runId"] for x in (await ca.get("/v1/runs")).json()["runs"]].count("same") == 1
            for _ in range(100):
                if received:
                    break
                await asyncio.sleep(0.1)
            assert len(received) == 1 and orjson.loads(received[0])["runId"] == "same"
    finally:
        await receiver.stop()
