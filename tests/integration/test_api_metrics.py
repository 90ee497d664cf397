"""The API's /metrics: no request mints a series, the
scrape can live on its own port and behind a token, replays are not submissions, and the scaling
signal counts what a worker pool has to carry (running runs, claimable jobs; not quota-held ones)
and goes absent, not stale, when Redis does not answer."""

from __future__ import annotations

import asyncio
import contextlib

import httpx
import orjson
import pytest
from redis.asyncio import Redis

from tests.integration.api_support import A, B, api, run_body, settings
from tests.integration.helpers import metric_samples, running_worker, until_status
from tests.support.redis_server import RedisServer, free_port
from tests.support.schema import K, stored

pytestmark = pytest.mark.integration


def series(text: str) -> int:
    return sum(1 for line in text.splitlines() if line and not line.startswith("#"))


async def bogus_requests(port: int, methods: list[str]) -> None:
    """Pipelined on one keep-alive connection: one request per method, every answer read."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(b"".join(f"{m} /v1/runs HTTP/1.1\r\nHost: x\r\n\r\n".encode() for m in methods))
        await writer.drain()
        seen, buf = 0, b""
        async with asyncio.timeout(30):
            while seen < len(methods):
                chunk = await reader.read(65536)
                assert chunk, f"connection closed after {seen} answers"
                buf += chunk
                seen += buf.count(b"HTTP/1.1 405")
                buf = buf[buf.rfind(b"HTTP/1.1 405") + 1 :] if b"HTTP/1.1 405" in buf else buf[-16:]
    finally:
        writer.close()


async def test_made_up_methods_mint_no_series(redis_url: str) -> None:
    async with api(settings(redis_url)) as url, httpx.AsyncClient(base_url=url) as c:
        port = int(url.rsplit(":", 1)[1])
        await c.get("/metrics")  # the scrape's own series, and the first made-up method's
        await bogus_requests(port, ["BREW"])
        before = (await c.get("/metrics")).text
        long = "X" * 3000
        await bogus_requests(port, [f"M{i}" for i in range(1000)] + [long])
        after = (await c.get("/metrics")).text
    assert series(after) == series(before), series(after) - series(before)
    assert long not in after and "M999" not in after
    m = metric_samples(after)
    key = ("agentmill_api_requests_total", (("code", "405"), ("method", "other"), ("route", "unmatched")))
    assert m[key] == 1002


async def test_metrics_on_their_own_port_and_behind_the_token(redis_url: str) -> None:
    port = free_port()
    s = settings(redis_url, api_metrics_port=port, metrics_token="scrape-me")
    async with api(s) as url, httpx.AsyncClient() as c:
        assert (await c.get(f"{url}/metrics")).status_code == 404
        assert (
            await c.get(f"{url}/metrics", headers={"Authorization": "Bearer scrape-me"})
        ).status_code == 404
        there = f"http://127.0.0.1:{port}/metrics"
        for headers in ({}, {"Authorization": "Bearer nope"}, A):
            r = await c.get(there, headers=headers)
            assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized"
        r = await c.get(there, headers={"Authorization": "Bearer scrape-me"})
        assert r.status_code == 200 and "agentmill_worker_slots_wanted 0.0" in r.text
    async with api(settings(redis_url, metrics_token="scrape-me")) as url, httpx.AsyncClient() as c:
        assert (await c.get(f"{url}/metrics", headers=A)).status_code == 401
        assert (
            await c.get(f"{url}/metrics", headers={"Authorization": "Bearer scrape-me"})
        ).status_code == 200


async def test_a_replayed_submission_is_counted_as_a_replay(redis_url: str) -> None:
    async with api(settings(redis_url)) as url, httpx.AsyncClient(base_url=url, headers=A) as c:
        assert (await c.post("/v1/runs", json=run_body(runId="r-1"))).status_code == 202
        assert (await c.post("/v1/runs", json=run_body(runId="r-1"))).status_code == 200
        batch = {"runs": [run_body(runId="r-1"), run_body(runId="r-2")]}
        assert (await c.post("/v1/runs/batch", json=batch)).status_code == 200
        m = metric_samples((await c.get("/metrics")).text)
    outcome = {o: m[("agentmill_api_submissions_total", (("outcome", o),))] for o in ("accepted", "replayed")}
    assert outcome == {"accepted": 2, "replayed": 2}


def gauge(text: str, name: str) -> float | None:
    return metric_samples(text).get((name, ()))


async def test_slots_wanted_counts_running_runs_and_leaves_out_jobs_a_quota_holds_back(
    redis_url: str, redis: Redis
) -> None:
    stall = [{"stall": True}]
    quotas = orjson.dumps({"tenant-b": {"maxRunning": 2}}).decode()
    s = settings(redis_url, tenant_quotas=quotas)
    async with (
        api(s) as url,
        running_worker(redis_url, tenant_quotas=quotas, drain_timeout_s=0.2),
        httpx.AsyncClient(base_url=url) as c,
    ):
        a = [(await c.post("/v1/runs", json=run_body(stall), headers=A)).json()["runId"] for _ in range(3)]
        for rid in a:  # tenant-a's runs are kept under the tenant's keys
            await until_status(redis, stored(s, "tenant-a", rid), "running")
        text = (await c.get("/metrics")).text
        # Three runs running, nothing queued: the pool must keep three slots, not scale to zero.
        assert gauge(text, "agentmill_queue_depth") == 0
        assert gauge(text, "agentmill_worker_slots_wanted") == 3
        b = [(await c.post("/v1/runs", json=run_body(stall), headers=B)).json()["runId"] for _ in range(5)]
        for _ in range(200):
            statuses = [await redis.hget(K.run(stored(s, "tenant-b", rid)), "status") for rid in b]
            if statuses.count(b"running") == 2:
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)  # a few claim polls: tenant-b's other three stay queued, held back
        text = (await c.get("/metrics")).text
        assert gauge(text, "agentmill_queue_depth") == 3
        assert gauge(text, "agentmill_worker_slots_wanted") == 5  # 3 + 2 running; 3 held back
        for rid in a + b:
            await c.post(f"/v1/runs/{rid}/abort", headers=A if rid in a else B)


async def test_the_cluster_gauges_go_absent_while_redis_is_down() -> None:
    server = RedisServer().start()
    try:
        async with api(settings(server.url)) as url, httpx.AsyncClient(base_url=url) as c:
            text = (await c.get("/metrics")).text
            assert gauge(text, "agentmill_worker_slots_wanted") == 0
            assert gauge(text, "agentmill_queue_depth") == 0
            server.stop()
            r = await c.get("/metrics")
            assert r.status_code == 200  # the API's own series are still served
            for name in (
                "agentmill_worker_slots_wanted",
                "agentmill_queue_depth",
                "agentmill_runs_awaiting_approval",
            ):
                assert name not in r.text
            assert "agentmill_api_requests_total" in r.text
    finally:
        server.stop()


async def _open_sse(c: httpx.AsyncClient, run_id: str, stack: contextlib.AsyncExitStack) -> int:
    """Opens the run's event stream and reads its first line; the stream stays open in ``stack``."""
    r = await stack.enter_async_context(c.stream("GET", f"/v1/runs/{run_id}/events", headers=A))
    if r.status_code == 200:
        lines = r.aiter_lines()  # kept until the stack closes (left unfinished, it closes the stream)
        stack.push_async_callback(lines.aclose)
        assert await anext(lines) == ": connected"
    return r.status_code


async def _until_gauge(c: httpx.AsyncClient, name: str, want: float) -> str:
    for _ in range(100):
        text = (await c.get("/metrics")).text
        if gauge(text, name) == want:
            return text
        await asyncio.sleep(0.05)
    raise AssertionError(f"{name} is {gauge(text, name)}, not {want}")


async def test_the_open_sse_streams_gauge_follows_real_streams_opened_and_closed_at_once(
    redis_url: str,
) -> None:
    """Streams opened side by side (no worker: the runs stay queued, their streams open), some of
    them beyond the process's cap and refused, then closed side by side: the gauge counts the ones
    held, never the refused ones, and is back at 0 once all closed."""
    name = "agentmill_api_sse_streams_open"
    s = settings(redis_url, max_streams=12, max_streams_per_tenant=12, sse_heartbeat_s=0.2)
    async with api(s) as url, httpx.AsyncClient(base_url=url, timeout=10) as c:
        text = (await c.get("/metrics")).text
        assert gauge(text, name) == 0 and gauge(text, "agentmill_api_streams_max") == 12
        ids = [(await c.post("/v1/runs", json=run_body(), headers=A)).json()["runId"] for _ in range(15)]
        first, second = contextlib.AsyncExitStack(), contextlib.AsyncExitStack()
        async with first, second:
            codes = await asyncio.gather(*(_open_sse(c, rid, first) for rid in ids[:8]))
            codes += await asyncio.gather(*(_open_sse(c, rid, second) for rid in ids[8:]))
            assert sorted(codes) == [200] * 12 + [429] * 3, codes
            await _until_gauge(c, name, 12)
            await first.aclose()  # eight streams closed at once
            text = await _until_gauge(c, name, 4)
            assert gauge(text, "agentmill_api_long_polls_open") == 0
        await _until_gauge(c, name, 0)
        # A long-poll is counted apart.
        wait = asyncio.create_task(c.get(f"/v1/runs/{ids[0]}/wait?timeout=3", headers=A))
        await _until_gauge(c, "agentmill_api_long_polls_open", 1)
        assert (await wait).status_code == 200
        text = await _until_gauge(c, "agentmill_api_long_polls_open", 0)
        assert gauge(text, name) == 0


async def test_the_api_exports_its_build_and_process_series(redis_url: str) -> None:
    from agentmill_client import __version__

    async with api(settings(redis_url)) as url, httpx.AsyncClient(base_url=url) as c:
        await c.get("/v1/runs", headers=A)
        m = metric_samples((await c.get("/metrics")).text)
    assert m[("agentmill_build_info", (("version", __version__),))] == 1
    assert m[("process_resident_memory_bytes", ())] > 0 and m[("process_open_fds", ())] > 0
    assert any(name == "python_info" for name, _ in m)
    ok = ("agentmill_api_requests_total", (("code", "200"), ("method", "GET"), ("route", "/v1/runs")))
    assert m[ok] == 1
