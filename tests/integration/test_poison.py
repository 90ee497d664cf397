"""A poison run cannot freeze the pool: a tenant's calculator bomb is refused
without blocking its worker, and a run that keeps killing its workers is quarantined."""

from __future__ import annotations

import asyncio
import threading
import time

import httpx
import orjson
import pytest
from redis.asyncio import Redis

from shared.clock import utc_day
from shared.fields import RunField, UsagePart, usage_field
from shared.quotas import DEFAULT_TENANT, NANO_USD
from tests.integration.api_support import A, B, api, settings
from tests.integration.helpers import assert_clean_stream, http_get, producer_for, script_run, stream
from tests.support.procs import WorkerProc, wait_until
from tests.support.redis_server import free_port
from tests.support.schema import K

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

BOMB = "(((99**64)**64)**64)**64"  # blocked a worker's event loop for ~58 s before the bound
FAST = {"AGENTMILL_LEASE_MS": "1500", "AGENTMILL_HEARTBEAT_MS": "300", "AGENTMILL_RECONCILE_MS": "300"}


def _probe_health(port: int, stop: threading.Event, seen: list[int | str]) -> None:
    """A kubelet: /healthz every 100 ms with a 0.5 s timeout, until told to stop."""
    while not stop.is_set():
        try:
            seen.append(http_get(f"http://127.0.0.1:{port}/healthz", timeout=0.5)[0])
        except OSError as exc:
            seen.append(repr(exc))
        time.sleep(0.1)


async def test_a_calculator_bomb_is_refused_and_neither_the_worker_nor_another_tenant_waits(
    redis_url: str,
) -> None:
    port = free_port()
    worker = WorkerProc(redis_url, env={"AGENTMILL_WORKER_METRICS_PORT": str(port)}).start()
    stop, seen = threading.Event(), list[int | str]()
    prober = threading.Thread(target=_probe_health, args=(port, stop, seen))
    try:
        assert await asyncio.to_thread(wait_until, lambda: _healthy(port), 30), (
            "the worker never answered /healthz"
        )
        prober.start()
        async with api(settings(redis_url)) as url, httpx.AsyncClient(base_url=url) as c:
            t0 = time.monotonic()
            bomb = (await c.post("/v1/runs", headers=A, json=_ask(BOMB))).json()["runId"]
            other = (await c.post("/v1/runs", headers=B, json=_ask("6*7"))).json()["runId"]
            done_other = (await c.get(f"/v1/runs/{other}/wait", headers=B, params={"timeout": 10})).json()
            other_s = time.monotonic() - t0
            done_bomb = (await c.get(f"/v1/runs/{bomb}/wait", headers=A, params={"timeout": 10})).json()
            bomb_s = time.monotonic() - t0
            events = (await c.get(f"/v1/runs/{bomb}/events", headers=A, params={"format": "json"})).json()
    finally:
        stop.set()
        if prober.is_alive():
            await asyncio.to_thread(prober.join)
        worker.stop()
    assert (
        done_other["status"] == "completed"
        and "42" in done_other["result"]["finalAssistantMessage"]["content"]
    ), done_other
    assert other_s < 5, f"the other tenant's 6*7 took {other_s:.1f} s"
    assert done_bomb["status"] == "completed" and bomb_s < 5, (done_bomb, bomb_s)
    results = [e["payload"] for e in events["events"] if e["kind"] == "tool_result"]
    assert len(results) == 1 and results[0]["isError"] and "result too large" in results[0]["content"]
    assert seen and all(s == 200 for s in seen), seen  # the worker's loop answered every probe


def _ask(content: str) -> dict[str, object]:
    return {"inputMessages": [{"role": "user", "content": content}]}  # the default profile: the calculator


def _healthy(port: int) -> bool:
    try:
        return http_get(f"http://127.0.0.1:{port}/healthz", timeout=0.5)[0] == 200
    except OSError:
        return False


async def test_a_run_that_kills_every_worker_is_quarantined_after_max_run_crashes(
    redis: Redis, redis_url: str
) -> None:
    """Each worker that takes the run is SIGKILLed by a failpoint right after the run's tool ran; the
    run ends failed (poison_run) after exactly AGENTMILL_MAX_RUN_CRASHES lost attempts, through its
    normal terminal path, and the next worker is not handed it again. Its model call counts in its
    tenant's usage report (GET /v1/usage's hash) with runs=1, as a worker's ending would count it."""
    max_crashes = 2
    env = {**FAST, "AGENTMILL_MAX_RUN_CRASHES": str(max_crashes)}
    p = producer_for(redis, redis_url)
    # sleep, not echo: a tool not declared without side effects, so its reply (and the model call's
    # usage) is written before the call runs, not held for its result
    sub = await p.submit(
        script_run([{"toolCalls": [{"name": "sleep", "arguments": {"ms": 1}}]}, {"text": "ok"}])
    )
    for n in range(1, max_crashes + 1):  # one doomed worker at a time: each takes the run and dies
        doomed = WorkerProc(redis_url, env={**env, "AGENTMILL_FAILPOINTS": "after_tool_effect:1"}).start()
        try:
            assert await asyncio.to_thread(wait_until, lambda d=doomed: not d.alive, 30), (
                f"attempt {n} never died"
            )
        finally:
            doomed.kill()
    survivor = WorkerProc(redis_url, env=env).start()  # sweeps the last dead worker's lease
    try:
        rec = await p.wait(sub.run_id, timeout_s=20)
    finally:
        survivor.stop()
    assert rec is not None and rec.status.value == "failed", rec
    h = await redis.hgetall(K.run(sub.run_id))
    assert int(h[RunField.CRASHES.encode()]) == max_crashes
    assert orjson.loads(h[b"result"])["lastError"]["code"] == "poison_run"
    assert int(h[b"epoch"]) == max_crashes + 1  # taken twice, then ended by the sweep, not a third worker
    events = await stream(redis, sub.run_id)
    assert_clean_stream(events)  # seq 1..n, no duplicate, one terminal status at the end
    errors = [e for e in events if e.kind == "error"]
    assert [e.payload["code"] for e in errors] == ["poison_run"] and errors[0] is events[-2]
    assert events[-1].payload["status"] == "failed"
    usage = rec.result.usage if rec.result else None
    assert usage is not None and usage.input_tokens > 0
    seconds, _ = await redis.time()
    tally = await redis.hgetall(K.usage_day(DEFAULT_TENANT, utc_day(seconds * 1000)))
    nano = round((usage.cost_usd or 0.0) * NANO_USD)
    parts = (
        usage.input_tokens,
        usage.output_tokens,
        nano,
        1,
        usage.cache_read_tokens,
        usage.cache_write_tokens,
    )
    assert tally == {
        usage_field("scripted", w).encode(): str(n).encode()
        for w, n in zip(UsagePart, parts, strict=True)
        if n
    }  # only what it adds (no cost field without prices), as a worker's commit
