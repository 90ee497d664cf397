"""Traces against Arize Phoenix as the OTLP receiver, installed by bin/peers/phoenix.sh.

A caller's span submits a run through the API with the Python client (which sends its
``traceparent``); a real worker process exporting to Phoenix is SIGKILLed mid-run and another resumes
it; Phoenix must then hold one trace, rooted at the caller's span (tests.peer.phoenix.check_trace).
``AGENTMILL_RECORD=1`` rewrites tests/data/phoenix/trace.json from what Phoenix answered;
tests/unit/test_phoenix_replay.py checks that recording in CI.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import orjson
import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from redis.asyncio import Redis

from agentmill_client import AsyncClient
from tests.integration.api_support import api, key, run_body, settings
from tests.peer import phoenix
from tests.support.procs import WorkerProc
from tests.support.schema import K

pytestmark = [
    pytest.mark.peer,
    pytest.mark.timeout(400),
    pytest.mark.skipif(phoenix.installed() is None, reason="Phoenix not installed: run bin/peers/phoenix.sh"),
]
FAST = {"AGENTMILL_LEASE_MS": "2000", "AGENTMILL_HEARTBEAT_MS": "300", "AGENTMILL_RECONCILE_MS": "300"}
STEPS = [{"text": f"step {i} ", "delayMs": 300, "toolCalls": [{"name": "flaky", "arguments": {"failures": 0}}]}
         for i in range(5)] + [{"text": "done"}]  # fmt: skip


async def test_phoenix_holds_one_trace_from_the_caller_across_a_sigkill(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    px = await asyncio.to_thread(phoenix.Phoenix(tmp_path).start)
    try:
        caller = TracerProvider(resource=Resource.create({"service.name": "caller"}))
        caller.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{px.url}/v1/traces")))
        otel = {"OTEL_EXPORTER_OTLP_ENDPOINT": px.url, "OTEL_BSP_SCHEDULE_DELAY": "50", **FAST}
        async with api(settings(redis_url)) as url, AsyncClient(url, token="tok-a") as c:
            with caller.get_tracer("caller").start_as_current_span("handle request"):
                sub = await c.submit(run_body(STEPS))
            victim = WorkerProc(redis_url, env={**otel, "AGENTMILL_WORKER_ID": "victim"}).start()
            try:
                deadline = time.monotonic() + 60
                while await redis.xlen(K.events(key(sub.run_id))) < 8:
                    assert time.monotonic() < deadline, "the victim never got going"
                    await asyncio.sleep(0.05)
                await asyncio.sleep(0.3)  # its first spans exported
            finally:
                victim.kill()
            rescuer = WorkerProc(redis_url, env={**otel, "AGENTMILL_WORKER_ID": "rescuer"}).start()
            try:
                view = await c.wait(sub.run_id, timeout=60)
            finally:
                rescuer.stop()
        caller.shutdown()
        assert view.status == "completed"
        deadline = time.monotonic() + 30
        while True:  # Phoenix ingests in the background
            spans = await asyncio.to_thread(px.spans)
            if any(s["name"].startswith("invoke_agent") for s in spans) or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.5)
        counts = phoenix.check_trace(spans, "handle request")
        print("phoenix received", counts)
        if os.environ.get("AGENTMILL_RECORD") == "1":
            phoenix.DATA.parent.mkdir(parents=True, exist_ok=True)
            phoenix.DATA.write_bytes(
                orjson.dumps(phoenix.recorded(spans), option=orjson.OPT_INDENT_2) + b"\n"
            )
    finally:
        px.stop()
