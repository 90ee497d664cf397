"""The HTTP API against a live uvicorn server, a real Redis and an in-process worker."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
import pytest
from redis.asyncio import Redis
from starlette.requests import Request
from starlette.responses import Response

from app.api import create_app
from shared.netguard import guarded_client
from shared.settings import Settings
from tests.integration.api_support import A, B, HookServer, api, key, run_body, settings
from tests.integration.helpers import running_worker, until_status
from tests.support.redis_server import RedisServer
from tests.support.schema import K

pytestmark = pytest.mark.integration


async def test_submit_is_idempotent_by_key_and_run_id(redis_url: str, redis: Redis) -> None:
    async with api(settings(redis_url)) as url, httpx.AsyncClient(base_url=url, headers=A) as c:
        r1 = await c.post("/v1/runs", json=run_body(), headers={"Idempotency-Key": "order-1"})
        r2 = await c.post("/v1/runs", json=run_body(), headers={"Idempotency-Key": "order-1"})
        assert r1.status_code == 202 and r2.status_code == 200
        assert r1.json()["runId"] == r2.json()["runId"] and r1.json()["eventsUrl"].endswith("/events")
        r3 = await c.post(
            "/v1/runs", json=run_body([{"text": "other"}]), headers={"Idempotency-Key": "order-1"}
        )
        assert r3.status_code == 409 and r3.json()["error"]["code"] == "conflict"
        # The same key from another tenant is another run.
        r4 = await c.post("/v1/runs", json=run_body(), headers={"Idempotency-Key": "order-1", **B})
        assert r4.status_code == 202 and r4.json()["runId"] != r1.json()["runId"]
        r5 = await c.post("/v1/runs", json=run_body(runId="mine-1"))
        r6 = await c.post("/v1/runs", json=run_body(runId="mine-1"))
        assert (r5.status_code, r6.status_code) == (202, 200)
    assert await redis.zcard(K.queue) == 3


async def test_a_thousand_item_batch_with_invalid_items(redis_url: str, redis: Redis) -> None:
    from redis.asyncio.client import Pipeline

    items: list[Any] = []
    for i in range(1000):
        if i % 10 == 3:
            items.append({"inputMessages": [{"role": "robot", "content": "x"}]})
        elif i % 10 == 7:
            items.append({"agent": "nobody", "inputMessages": [{"role": "user", "content": "x"}]})
        else:
            items.append(run_body())
    calls = {"pipelines": 0}
    orig = Pipeline.execute

    async def counting(self: Pipeline, *a: Any, **kw: Any) -> Any:
        calls["pipelines"] += 1
        return await orig(self, *a, **kw)

    Pipeline.execute = counting  # type: ignore[method-assign]
    try:
        async with (
            api(settings(redis_url)) as url,
            httpx.AsyncClient(base_url=url, headers=A, timeout=30) as c,
        ):
            r = await c.post("/v1/runs/batch", json={"runs": items})
    finally:
        Pipeline.execute = orig  # type: ignore[method-assign]
    assert r.status_code == 200
    results = r.json()["results"]
    assert len(results) == 1000
    for i, res in enumerate(results):
        if i % 10 == 3:
            assert set(res) == {"error"} and res["error"]["field"] == f"runs.{i}.inputMessages.0.role"
        elif i % 10 == 7:
            assert res["error"]["code"] == "unknown_agent" and res["error"]["field"] == f"runs.{i}.agent"
        else:
            assert set(res) == {"runId", "status"} and res["status"] == "queued"
    assert await redis.zcard(K.queue) == 800
    assert calls["pipelines"] <= 2  # 800 enqueues in one pipelined round trip (plus script loading)


async def read_sse(
    c: httpx.AsyncClient, path: str, *, stop_after: int | None = None, headers: dict[str, str] | None = None
) -> tuple[list[int], list[str]]:
    seqs, comments = [], []
    async with c.stream("GET", path, headers=headers or {}) as resp:
        assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/event-stream")
        async for line in resp.aiter_lines():
            if line.startswith("id: "):
                seqs.append(int(line[4:]))
                if stop_after is not None and len(seqs) >= stop_after:
                    break  # drop the connection mid-stream
            elif line.startswith(":"):
                comments.append(line)
    return seqs, comments


async def test_events_sse_resume_without_loss_or_repeat_and_json_pages(redis_url: str) -> None:
    script = [
        {
            "text": "one two three four",
            "delayMs": 300,
            "toolCalls": [{"name": "echo", "arguments": {"text": "x"}}],
        },
        {"text": "done", "delayMs": 300},
    ]
    import os

    os.environ["AGENTMILL_SSE_HEARTBEAT_S"] = "0.2"
    try:
        async with (
            api(settings(redis_url)) as url,
            running_worker(redis_url),
            httpx.AsyncClient(base_url=url, headers=A, timeout=30) as c,
        ):
            run_id = (await c.post("/v1/runs", json=run_body(script))).json()["runId"]
            first, _ = await read_sse(c, f"/v1/runs/{run_id}/events", stop_after=2)
            rest, comments = await read_sse(
                c, f"/v1/runs/{run_id}/events", headers={"Last-Event-ID": str(first[-1])}
            )
            assert first + rest == list(range(1, len(first) + len(rest) + 1))  # every seq once, in order
            assert comments  # heartbeats while the model was thinking
            again, _ = await read_sse(c, f"/v1/runs/{run_id}/events?after=3")
            assert again == list(range(4, len(first) + len(rest) + 1))
            page = (
                await c.get(f"/v1/runs/{run_id}/events", params={"format": "json", "after": 1, "limit": 2})
            ).json()
            assert [e["seq"] for e in page["events"]] == [2, 3] and page["next"] == 3
            final = (await c.get(f"/v1/runs/{run_id}/wait", params={"timeout": 5})).json()
            assert (
                final["status"] == "completed"
                and final["result"]["finalAssistantMessage"]["content"] == "done"
            )
            assert (await c.get("/v1/runs/nope/events")).status_code == 404
    finally:
        os.environ.pop("AGENTMILL_SSE_HEARTBEAT_S", None)


async def test_auth_and_tenant_isolation(redis_url: str) -> None:
    async with api(settings(redis_url)) as url, httpx.AsyncClient(base_url=url) as c:
        assert (await c.post("/v1/runs", json=run_body())).status_code == 401
        assert (
            await c.post("/v1/runs", json=run_body(), headers={"Authorization": "Bearer wrong"})
        ).status_code == 401
        run_id = (await c.post("/v1/runs", json=run_body(), headers=A)).json()["runId"]
        assert (await c.get(f"/v1/runs/{run_id}", headers=A)).status_code == 200
        for path in (f"/v1/runs/{run_id}", f"/v1/runs/{run_id}/events?format=json"):
            r = await c.get(path, headers=B)
            assert r.status_code == 404 and r.json()["error"]["code"] == "unknown_run"
        assert (await c.post(f"/v1/runs/{run_id}/abort", headers=B)).status_code == 404
        assert (await c.get("/healthz")).status_code == 200  # probes need no token


async def test_413_422_429(redis_url: str) -> None:
    async with (
        api(settings(redis_url, max_body_bytes=5_000, max_queue_depth=2, max_batch=3)) as url,
        httpx.AsyncClient(base_url=url, headers=A) as c,
    ):
        big = run_body([{"text": "x" * 6_000}])
        r = await c.post("/v1/runs", json=big)
        assert r.status_code == 413 and r.json()["error"]["code"] == "too_large"
        raw = orjson.dumps(big)

        async def chunked() -> AsyncIterator[bytes]:  # no Content-Length: counted as it arrives
            for i in range(0, len(raw), 1_000):
                yield raw[i : i + 1_000]

        r = await c.post("/v1/runs", content=chunked(), headers={"Content-Type": "application/json"})
        assert r.status_code == 413 and r.json()["error"]["code"] == "too_large"
        r = await c.post(
            "/v1/runs",
            json={"inputMessages": [{"role": "user", "content": "x"}], "loopLimits": {"maxIterations": 0}},
        )
        assert r.status_code == 422 and r.json()["error"]["field"] == "loopLimits.maxIterations"
        r = await c.post("/v1/runs/batch", json={"runs": [run_body()] * 4})
        assert r.status_code == 413 and r.json()["error"]["code"] == "batch_too_large"
        assert (await c.post("/v1/runs", json=run_body())).status_code == 202
        assert (await c.post("/v1/runs", json=run_body())).status_code == 202
        await asyncio.sleep(0.6)  # the API caches the queue depth for half a second
        r = await c.post("/v1/runs", json=run_body())
        assert r.status_code == 429 and r.headers["retry-after"] and r.json()["error"]["code"] == "queue_full"


async def test_503_while_redis_is_down() -> None:
    with RedisServer() as server:
        async with (
            api(Settings(redis_url=server.url, auth_disabled=True)) as url,
            httpx.AsyncClient(base_url=url, timeout=30) as c,
        ):
            assert (await c.get("/readyz")).status_code == 200
            server.stop(kill=True)
            r = await c.post("/v1/runs", json=run_body())
            assert r.status_code == 503 and r.json()["error"]["code"] == "redis_unavailable"
            assert (await c.get("/readyz")).status_code == 503
            assert (await c.get("/healthz")).status_code == 200
            server.start()
            assert (await c.post("/v1/runs", json=run_body())).status_code == 202
            # Stalled rather than down: readiness fails with the same JSON error, not a plain 500.
            assert server.proc is not None
            os.kill(server.proc.pid, signal.SIGSTOP)
            try:
                r = await c.get("/readyz")
            finally:
                os.kill(server.proc.pid, signal.SIGCONT)
            assert r.status_code == 503 and r.json()["error"]["code"] == "redis_unavailable"
            assert (await c.get("/readyz")).status_code == 200


async def test_abort_approvals_and_sessions_routes(redis_url: str) -> None:
    async with api(settings(redis_url)) as url, httpx.AsyncClient(base_url=url, headers=A) as c:
        queued = (await c.post("/v1/runs", json=run_body())).json()["runId"]
        assert (await c.post(f"/v1/runs/{queued}/abort")).json()["result"] == "aborted"
        assert (await c.post(f"/v1/runs/{queued}/abort")).json()["result"] == "finished"
        assert (await c.post("/v1/runs/unknown/abort")).status_code == 404
        body = run_body([{"toolCalls": [{"id": "t1", "name": "echo", "arguments": {"text": "a"}}]}, {"text": "ok"}],
                        toolPolicy={"requireApprovalByDefault": True}, sessionId="s-api", autoCreateSession=True)  # fmt: skip
        rid = (await c.post("/v1/runs", json=body)).json()["runId"]
        async with running_worker(redis_url):
            view = (await c.get(f"/v1/runs/{rid}/wait", params={"timeout": 1})).json()
            while view["status"] != "awaiting_human":
                view = (await c.get(f"/v1/runs/{rid}")).json()
                await asyncio.sleep(0.05)
            assert view["pendingApprovals"][0]["toolCallId"] == "c1.0"
            r = await c.post(
                f"/v1/runs/{rid}/approvals", json={"decisions": [{"toolCallId": "nope", "approved": True}]}
            )
            assert r.status_code == 404 and r.json()["error"]["code"] == "unknown_tool_call"
            r = await c.post(
                f"/v1/runs/{rid}/approvals", json={"decisions": [{"toolCallId": "c1.0", "approved": True}]}
            )
            assert r.status_code == 200 and r.json()["resumed"] is True
            r = await c.post(
                f"/v1/runs/{rid}/approvals", json={"decisions": [{"toolCallId": "c1.0", "approved": True}]}
            )
            assert r.status_code == 409
            final = (await c.get(f"/v1/runs/{rid}/wait", params={"timeout": 10})).json()
        assert final["status"] == "completed"
        session = (await c.get("/v1/sessions/s-api")).json()
        assert session["runs"] == [rid] and len(session["history"]) == 1
        assert (await c.get("/v1/sessions/s-api", headers=B)).status_code == 404


async def test_webhook_is_signed_retried_and_delivered_once(redis_url: str, redis: Redis) -> None:
    received: list[tuple[dict[str, str], bytes]] = []

    async def hook(request: Request) -> Response:
        received.append((dict(request.headers), await request.body()))
        return Response(status_code=500 if len(received) == 1 else 200)

    receiver = HookServer(hook)
    port = receiver.port
    await receiver.start()
    from producer import webhooks

    original = webhooks.backoff_ms
    webhooks.backoff_ms = lambda attempt: 200  # type: ignore[assignment]
    try:
        s = settings(redis_url, webhook_secret="whsec", webhook_allow_hosts="127.0.0.1")
        async with api(s) as url, running_worker(redis_url), httpx.AsyncClient(base_url=url, headers=A) as c:
            rid = (await c.post("/v1/runs", json=run_body(webhook=f"http://127.0.0.1:{port}/hook"))).json()[
                "runId"
            ]
            for _ in range(100):
                if len(received) >= 2:
                    break
                await asyncio.sleep(0.1)
            await asyncio.sleep(1.0)  # a third delivery would have happened by now
    finally:
        webhooks.backoff_ms = original  # type: ignore[assignment]
        await receiver.stop()
    assert len(received) == 2
    for headers, body in received:
        assert headers["x-agentmill-delivery"] == key(rid)  # stable, the id the run's keys use
        assert (
            headers["x-agentmill-signature"]
            == "sha256=" + hmac.new(b"whsec", body, hashlib.sha256).hexdigest()
        )
        assert orjson.loads(body)["status"] == "completed"
    assert [h["x-agentmill-attempt"] for h, _ in received] == ["1", "2"]
    state = await redis.hgetall(K.webhook(key(rid)))
    assert state[b"delivered"] == b"1"


async def test_an_unusable_webhook_url_is_given_up_without_stopping_other_deliveries(
    redis_url: str, redis: Redis
) -> None:
    received: list[bytes] = []

    async def hook(request: Request) -> Response:
        received.append(await request.body())
        return Response(status_code=200)

    receiver = HookServer(hook)
    port = receiver.port
    await receiver.start()
    from producer import webhooks

    # Two finished runs awaiting delivery; the first's URL (stored before submissions validated
    # webhook URLs) has a port out of range, which the URL parser refuses.
    urls = {"bad": "http://127.0.0.1:99999/hook", "good": f"http://127.0.0.1:{port}/hook"}
    for rid, hook_url in urls.items():
        await redis.hset(K.run(rid), mapping={"webhook": hook_url, "result": b'{"status":"completed"}'})
        await redis.lpush(K.webhooks, rid)
    s = settings(redis_url, webhook_allow_hosts="127.0.0.1")
    try:
        async with guarded_client() as http:
            assert await webhooks.deliver_once(redis, s, http) == 2
    finally:
        await receiver.stop()
    assert received == [b'{"status":"completed"}']
    bad = await redis.hgetall(K.webhook("bad"))
    assert bad[b"failed"] == b"1" and bad[b"lastError"].startswith(b"refused")
    assert (await redis.hgetall(K.webhook("good")))[b"delivered"] == b"1"
    assert await redis.zcard(K.webhooks_due) == 0


async def test_api_metrics_pass_promtool(redis_url: str) -> None:
    async with api(settings(redis_url)) as url, httpx.AsyncClient(base_url=url, headers=A) as c:
        sub = await c.post("/v1/runs", json=run_body())
        assert sub.status_code == 202
        assert (await c.get("/v1/runs/nope-42")).status_code == 404
        resp = await c.get("/metrics")
    assert resp.status_code == 200
    text = resp.text
    assert 'agentmill_api_submissions_total{outcome="accepted"} 1.0' in text
    assert "agentmill_queue_depth 1.0" in text
    assert 'route="/v1/runs/{run_id}"' in text  # labels carry the route template, never an id
    assert "nope-42" not in text and sub.json()["runId"] not in text
    promtool = shutil.which("promtool") or shutil.which("promtool", path=os.path.dirname(sys.executable))
    if promtool is None:
        pytest.skip("promtool is not installed (bin/dev installs it from Debian's prometheus package)")
    check = await asyncio.to_thread(
        subprocess.run, [promtool, "check", "metrics"], input=text.encode(), capture_output=True
    )
    assert check.returncode == 0, check.stdout + check.stderr


async def test_runs_awaiting_approval_are_exported_once_from_redis(redis_url: str, redis: Redis) -> None:
    def awaiting(text: str) -> float:
        line = next(x for x in text.splitlines() if x.startswith("agentmill_runs_awaiting_approval "))
        return float(line.split()[1])

    async with (
        api(settings(redis_url)) as url,
        running_worker(redis_url),
        httpx.AsyncClient(base_url=url, headers=A) as c,
    ):
        parked = [
            (await c.post("/v1/runs", json=run_body(
                [{"toolCalls": [{"id": "t1", "name": "echo", "arguments": {}}]}, {"text": "ok"}],
                toolPolicy={"requireApprovalByDefault": True},
            ))).json()["runId"]
            for _ in range(2)
        ]  # fmt: skip
        for rid in parked:
            await until_status(redis, key(rid), "awaiting_human")
        assert awaiting((await c.get("/metrics")).text) == 2
        assert (await c.post(f"/v1/runs/{parked[0]}/abort")).status_code == 200
        decision = {"decisions": [{"toolCallId": "c1.0", "approved": True}]}
        assert (await c.post(f"/v1/runs/{parked[1]}/approvals", json=decision)).status_code == 200
        final = (await c.get(f"/v1/runs/{parked[1]}/wait", params={"timeout": 10})).json()
        assert final["status"] == "completed"
        assert awaiting((await c.get("/metrics")).text) == 0  # neither the abort nor the approval leaks
    assert await redis.zcard(K.awaiting) == 0


def test_the_openapi_document_has_no_dangling_references() -> None:
    # The events route once pointed at #/components/schemas/EventsPage without registering it.
    doc = create_app(Settings(auth_disabled=True)).openapi()
    refs = set(re.findall(r"#/components/schemas/(\w+)", orjson.dumps(doc).decode()))
    assert "EventsPage" in refs and refs <= set(doc["components"]["schemas"])
    assert set(doc["paths"]["/v1/runs/{run_id}/events"]["get"]["responses"]["200"]["content"]) == {
        "application/json",
        "text/event-stream",
    }


async def test_no_page_loads_a_script_from_another_origin(redis_url: str) -> None:
    # FastAPI's /docs and /redoc pages load Swagger UI / ReDoc from a CDN, unpinned and without a
    # CSP, on the console's origin: not served. The OpenAPI document is.
    async with api(settings(redis_url)) as base, httpx.AsyncClient(base_url=base) as c:
        for path in ("/docs", "/redoc", "/docs/oauth2-redirect"):
            r = await c.get(path)
            assert r.status_code == 404, path
            assert "cdn" not in r.text.lower()
        assert (await c.get("/openapi.json")).json()["info"]["title"] == "agentmill"
