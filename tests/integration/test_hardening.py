"""Bad input is a 4xx, never a 5xx or a stuck run; a crashed effect fails its run (issue 13)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import orjson
import pytest
import uvicorn
from redis.asyncio import Redis

from producer.api.app import create_app
from producer.api.serve import server_config
from shared import keys, limits
from shared.redis_server import free_port
from shared.settings import Settings
from tests.integration.helpers import producer_for, running_worker, script_run, wait_all

pytestmark = pytest.mark.integration
TOKENS = "tok-a=tenant-a,tok-b=tenant-b"
A = {"Authorization": "Bearer tok-a"}
B = {"Authorization": "Bearer tok-b"}


@asynccontextmanager
async def api(settings: Settings) -> AsyncIterator[str]:
    port = free_port()
    server = uvicorn.Server(
        server_config(create_app(settings), settings, host="127.0.0.1", port=port, log_level="error")
    )
    task = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task


def settings(redis_url: str, **kw: Any) -> Settings:
    return Settings(redis_url=redis_url, api_tokens=TOKENS, **kw)


def body(**kw: Any) -> dict[str, Any]:
    return {"agent": "scripted", "inputMessages": [{"role": "user", "content": "go"}], **kw}


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
        await redis.rpush(keys.session_history_key("s-corrupt"), b"{not json")
        sub = await p.submit(script_run([{"text": "two"}], sessionId="s-corrupt"))
        rec = (await wait_all(p, [sub.run_id], 30))[sub.run_id]
    assert rec.status.value == "failed", rec
    assert rec.result is not None and rec.result.last_error is not None
    assert rec.result.last_error.code == "internal"
    events = await redis.xrange(keys.events_stream(sub.run_id))
    last = orjson.loads(events[-1][1][b"payload"])
    assert last["status"] == "failed" and last["error"]["code"] == "internal"
