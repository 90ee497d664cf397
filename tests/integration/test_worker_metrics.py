"""The worker's /metrics after real runs, and /healthz when its event loop is blocked."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import threading
import time

import pytest
from prometheus_client import CollectorRegistry
from redis.asyncio import Redis

from shared.settings import Settings
from tests.integration.helpers import (
    http_get,
    metric_samples,
    producer_for,
    running_worker,
    script_run,
    until_status,
    wait_all,
)
from tests.support.procs import workers
from worker.process.health import HealthServer
from worker.process.jobs import WorkerProcess

pytestmark = pytest.mark.integration


async def test_metrics_after_real_runs(redis: Redis, redis_url: str) -> None:
    wp = WorkerProcess(Settings(redis_url=redis_url, poll_delay_s=0.02, worker_metrics_port=0))
    task = asyncio.create_task(wp.run())
    try:
        p = producer_for(redis, redis_url)
        ok = await p.submit(
            script_run(
                [
                    {"error": {"status": 503, "retryAfterMs": 10}},
                    {"toolCalls": [{"name": "echo", "arguments": {"text": "x"}}]},
                    {"toolCalls": [{"name": "flaky", "arguments": {"failures": 1}}]},
                    {"text": "done"},
                ]
            )
        )
        bad = await p.submit(script_run([{"error": {"status": 401}}]))
        overflow = {"error": {"status": 400, "code": "context_length_exceeded", "message": "too long"}}
        squeezed = await p.submit(script_run([overflow, {"text": "fits now"}]))
        parked = await p.submit(
            script_run(
                [{"toolCalls": [{"name": "echo", "arguments": {}}]}],
                toolPolicy={"requireApprovalByDefault": True},
            )
        )
        await wait_all(p, [ok.run_id, bad.run_id, squeezed.run_id], 20)
        await until_status(redis, parked.run_id, "awaiting_human")  # not terminal: wait for it to park
        while wp.metrics_port is None:
            await asyncio.sleep(0.01)
        status, body = await asyncio.to_thread(http_get, f"http://127.0.0.1:{wp.metrics_port}/metrics")
    finally:
        wp.request_stop()
        await task
    assert status == 200
    m = metric_samples(body)

    def one(name: str, **labels: str) -> float:
        return m[(name, tuple(sorted(labels.items())))]

    # ok: 503 → retry, echo, flaky (fails once, retried), done. bad: 401. squeezed: context-length
    # error → compaction → answer. parked: a tool call that waits for approval.
    assert one("agentmill_runs_started_total", resumed="false") == 4
    assert one("agentmill_runs_finished_total", status="completed") == 2
    assert one("agentmill_runs_finished_total", status="failed") == 1
    assert ("agentmill_runs_awaiting_approval", ()) not in m  # the API exports it, from Redis
    assert one("agentmill_runs_in_progress") == 0
    assert one("agentmill_run_iterations_count") == 3 and one("agentmill_run_iterations_sum") == 3 + 0 + 1
    assert one("agentmill_run_duration_seconds_count") == 3
    assert one("agentmill_model_calls_total", outcome="error") == 3  # 503, 401, overflow
    assert one("agentmill_model_calls_total", outcome="success") == 5
    assert one("agentmill_model_call_duration_seconds_count") == 8
    assert one("agentmill_model_time_to_first_token_seconds_count") == 5
    assert one("agentmill_model_retries_total", reason="http_503") == 1
    assert one("agentmill_model_tokens_total", direction="input") > 0
    assert one("agentmill_model_tokens_total", direction="output") > 0
    assert one("agentmill_compactions_total", reason="overflow") == 1
    assert one("agentmill_tool_calls_total", tool="echo", outcome="ok") == 1  # the parked one never ran
    assert one("agentmill_tool_calls_total", tool="flaky", outcome="ok") == 1
    assert one("agentmill_tool_retries_total", tool="flaky") == 1
    assert one("agentmill_tool_call_duration_seconds_count", tool="flaky") == 1
    assert one("agentmill_events_published_total", kind="tool_call") == 3
    assert one("agentmill_events_published_total", kind="tool_result") == 2
    assert one("agentmill_events_published_total", kind="assistant_message") == 5
    assert one("agentmill_events_published_total", kind="compaction") == 1
    assert (
        one("agentmill_runs_redispatched_total", reason="lease_expired") == 0
        and one("agentmill_runs_resumed_total") == 0
    )
    step = {"from_state": "model_running.calling", "to_state": "model_running.retrying"}
    assert one("agentmill_state_transitions_total", **step) == 1
    assert one("agentmill_state_transitions_total", from_state="idle", to_state="preparing") == 4
    assert not any("run_" in k for name, labels in m for k in dict(labels).values())  # no run ids in labels
    promtool = shutil.which("promtool") or shutil.which("promtool", path=os.path.dirname(sys.executable))
    if promtool:
        check = await asyncio.to_thread(
            subprocess.run, [promtool, "check", "metrics"], input=body.encode(), capture_output=True
        )
        assert check.returncode == 0, check.stdout + check.stderr


async def test_health_fails_while_the_loop_is_blocked() -> None:
    server = HealthServer(CollectorRegistry(), lambda: b"", stale_after_s=0.8)
    port = await server.start("127.0.0.1", 0)
    try:
        await asyncio.sleep(0.6)
        assert (await asyncio.to_thread(http_get, f"http://127.0.0.1:{port}/healthz"))[0] == 200
        probe: dict[str, object] = {}

        def kubelet() -> None:  # a probe with a 0.5 s timeout, sent while the loop is blocked
            try:
                probe["status"] = http_get(f"http://127.0.0.1:{port}/healthz", timeout=0.5)[0]
            except OSError as exc:
                probe["error"] = exc

        t = threading.Thread(target=kubelet)
        t.start()
        time.sleep(1.5)  # block the event loop (the bug this probe exists to catch)
        assert server.health()[0] == 503  # right after the block, the heartbeat is stale
        await asyncio.to_thread(t.join)
        assert "error" in probe  # the probe timed out: a blocked loop cannot answer
        await asyncio.sleep(0.6)
        status, body = await asyncio.to_thread(http_get, f"http://127.0.0.1:{port}/healthz")
        assert status == 200 and '"ok"' in body
    finally:
        await server.stop()


async def test_a_run_whose_worker_died_counts_as_redispatched(redis: Redis, redis_url: str) -> None:
    """agentmill_runs_redispatched_total counts a run's retry after its worker is lost (the job
    retries counter it replaces never moved: a claimed job is never run again under its id)."""
    fast = {"AGENTMILL_LEASE_MS": "800", "AGENTMILL_RECONCILE_MS": "200"}
    p = producer_for(redis, redis_url)
    with workers(redis_url, 1, env=fast) as (doomed,):
        sub = await p.submit(script_run([{"stall": True}]))
        await until_status(redis, sub.run_id, "running")
        doomed.kill()
    async with running_worker(redis_url, lease_ms=800, reconcile_ms=200, drain_timeout_s=0.2) as wp:
        for _ in range(100):
            m = metric_samples(wp.metrics.render().decode())
            if m[("agentmill_runs_redispatched_total", (("reason", "lease_expired"),))] >= 1:
                break
            await asyncio.sleep(0.05)
        assert m[("agentmill_runs_redispatched_total", (("reason", "lease_expired"),))] == 1
        assert m[("agentmill_runs_redispatched_total", (("reason", "job_lost"),))] == 0
        await p.abort(sub.run_id)
