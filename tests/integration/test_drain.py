"""Scale-in and signals with real worker processes.

A SIGTERMed worker lets the tool calls it has in flight finish and record before it hands its runs
back, so the worker that resumes them executes none of them again; and a worker that cannot reach
Redis at start-up says so, answers /healthz and still stops at once on SIGTERM or Ctrl-C.
"""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from pathlib import Path

import httpx
import orjson
import pytest
from redis.asyncio import Redis

from tests.chaos.harness import chaos_profiles
from tests.integration.helpers import (
    assert_clean_stream,
    http_get,
    producer_for,
    script_run,
    stream,
    wait_all,
)
from tests.support.ledger import Ledger
from tests.support.ports import free_port
from tests.support.procs import WorkerProc
from tests.support.schema import K, tool_records
from tests.support.waits import until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

RUNS = 8
FAST = {"AGENTMILL_LEASE_MS": "2000", "AGENTMILL_HEARTBEAT_MS": "300", "AGENTMILL_RECONCILE_MS": "300"}


def ledger_run(i: int, delay_ms: int, model_delay_ms: int = 0) -> dict[str, object]:
    script = [{"text": "let me record this step ", "delayMs": model_delay_ms,
               "toolCalls": [{"name": "ledger", "arguments": {"step": i, "delayMs": delay_ms}}]},
              {"toolCalls": [{"name": "ledger", "arguments": {"step": 100 + i}}]}, {"text": "done"}]  # fmt: skip
    return {"agent": "chaos", "inputMessages": [{"role": "user", "content": f"drain {i}"}],
            "runtimeHints": {"script": script}}  # fmt: skip


@pytest.mark.parametrize("in_flight", ["tool", "model"])
async def test_sigterm_lets_calls_in_flight_finish_and_record(
    redis: Redis, redis_url: str, tmp_path: Path, in_flight: str
) -> None:
    """The scale-in finding: the tool calls in flight at SIGTERM (or asked for by a model reply that
    arrived during the drain) were executed again by the worker that resumed the run (claimed, but
    no result recorded). Now: each call recorded once, 0 executed twice, no re-execution notice."""
    tool_ms, model_ms = (2000, 0) if in_flight == "tool" else (0, 1500)
    with Ledger() as ledger:
        profiles = chaos_profiles(ledger.url, tmp_path / "profiles.json")
        env = {**FAST, "AGENTMILL_PROFILES": str(profiles), "AGENTMILL_DRAIN_TIMEOUT_S": "10"}
        p = producer_for(redis, redis_url, profiles=str(profiles))
        subs = await p.submit_many([ledger_run(i, tool_ms, model_ms) for i in range(RUNS)])
        ids = [s.run_id for s in subs]  # type: ignore[union-attr]
        first = WorkerProc(redis_url, env={**env, "AGENTMILL_WORKER_ID": "leaving"},
                           log=tmp_path / "leaving.log").start()  # fmt: skip

        async def started() -> bool:
            if in_flight == "tool":  # every run's first tool call claimed (each takes 2 s)
                return all([len(await tool_records(redis, r)) >= 1 for r in ids])
            return all([await redis.xlen(K.events(r)) >= 2 for r in ids])  # the model call streaming

        await until(f"every run's first {in_flight} call under way", started, within=20, every=0.02)
        assert not ledger.executions  # nothing finished yet
        t0 = time.monotonic()
        first.signal(signal.SIGTERM)
        rc = await asyncio.to_thread(first.wait, 15)
        assert rc == 0, (tmp_path / "leaving.log").read_text()
        assert time.monotonic() - t0 < 9  # the calls take 2 s; it did not wait for the whole timeout
        for r in ids:
            tools = {k.decode(): orjson.loads(v) for k, v in (await redis.hgetall(K.tools(r))).items()}
            if in_flight == "tool":
                assert [t["state"] for t in tools.values()] == ["done"], tools  # recorded, not lost
            assert (await redis.hget(K.run(r), "owner")) == b""  # handed back
        second = WorkerProc(redis_url, env={**env, "AGENTMILL_WORKER_ID": "staying"}).start()
        try:
            recs = await wait_all(p, ids, 30)
        finally:
            second.stop()
        assert {r.status.value for r in recs.values()} == {"completed"}
        for r in ids:
            events = await stream(redis, r)
            assert_clean_stream(events)
            assert not [e for e in events if e.payload.get("status") == "tool_reexecuted"], r
            tools = {k.decode(): orjson.loads(v) for k, v in (await redis.hgetall(K.tools(r))).items()}
            assert {t["attempts"] for t in tools.values()} == {1}, tools
        assert sum(len(v) for v in ledger.executions.values()) == 2 * len(ids)
        twice = {k: len(v) for k, v in ledger.executions.items() if len(v) > 1}
        assert twice == {}  # 0 re-executions


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
async def test_worker_without_redis_logs_serves_healthz_and_stops_at_once(tmp_path: Path, sig: int) -> None:
    port = free_port()
    log = tmp_path / "worker.log"
    w = WorkerProc(f"redis://127.0.0.1:{free_port()}/0", log=log,
                   env={"AGENTMILL_WORKER_METRICS_PORT": str(port)}).start()  # fmt: skip
    try:

        async def healthz() -> tuple[int, str] | None:
            try:
                return await asyncio.to_thread(http_get, f"http://127.0.0.1:{port}/healthz", 1.0)
            except OSError:
                return None

        status, body = await until("/healthz answering", healthz, within=15)
        assert status == 503 and orjson.loads(body)["status"] == "starting", body

        async def outage_logged() -> bool:
            return "redis unreachable at redis://127.0.0.1:" in log.read_text()

        await until("the outage logged", outage_logged, within=15)
        await asyncio.sleep(1.0)  # more probes fail meanwhile: still the one line
        assert log.read_text().count("redis unreachable at") == 1, log.read_text()
        assert "Connection refused" in log.read_text() or "ConnectionError" in log.read_text()
        t0 = time.monotonic()
        w.signal(sig)
        rc = await asyncio.to_thread(w.wait, 5)
        assert rc is not None and time.monotonic() - t0 < 2.0, log.read_text()
    finally:
        w.kill()


async def test_api_exits_at_once_on_sigterm_with_an_sse_stream_open(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    """The finding: uvicorn waited for the open SSE stream, so the API outlived SIGTERM until the run
    ended (88 s). Now the stream ends cleanly and the process exits within 2 s."""
    p = producer_for(redis, redis_url)
    sub = await p.submit(script_run([{"text": "never taken: no worker"}]))
    port, log = free_port(), tmp_path / "api.log"
    api = WorkerProc(redis_url, argv=["-m", "app.cli", "api"], log=log,
                     env={"AGENTMILL_API_PORT": str(port), "AGENTMILL_AUTH_DISABLED": "true"}).start()  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}"

        async def ready() -> bool:
            try:
                return (await asyncio.to_thread(http_get, f"{url}/readyz", 1.0))[0] == 200
            except OSError:
                return False

        await until("the API ready", ready, within=30)
        got: list[bytes] = []
        opened = threading.Event()

        def follow() -> None:
            with httpx.stream("GET", f"{url}/v1/runs/{sub.run_id}/events", timeout=30) as r:  # type: ignore[union-attr]
                for chunk in r.iter_bytes():
                    got.append(chunk)
                    opened.set()

        reader = asyncio.create_task(asyncio.to_thread(follow))
        assert await asyncio.to_thread(opened.wait, 10)
        t0 = time.monotonic()
        api.signal(signal.SIGTERM)
        rc = await asyncio.to_thread(api.wait, 5)
        assert rc is not None and time.monotonic() - t0 < 2.0, log.read_text()
        await asyncio.wait_for(reader, 5)  # the stream ended cleanly (no read error)
        assert b"".join(got).startswith(b": connected")
    finally:
        api.kill()
