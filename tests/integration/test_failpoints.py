"""A worker killed at the two worst moments, deterministically: what the next worker does
about it is counted and visible in the stream. The chaos test hits the same points at random."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
import pytest
from redis.asyncio import Redis

from tests.chaos.harness import chaos_profiles
from tests.integration.helpers import (
    assert_clean_stream,
    http_get,
    metric_samples,
    producer_for,
    stream,
    wait_all,
)
from tests.support.ledger import Ledger
from tests.support.procs import WorkerProc, wait_until
from tests.support.redis_server import free_port
from tests.support.schema import K

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

FAST = {"AGENTMILL_LEASE_MS": "1500", "AGENTMILL_HEARTBEAT_MS": "300", "AGENTMILL_RECONCILE_MS": "300"}


def chaos_run(script: list[dict[str, object]]) -> dict[str, object]:
    return {"agent": "chaos", "inputMessages": [{"role": "user", "content": "go"}],
            "runtimeHints": {"script": script}}  # fmt: skip


async def crash_then_rescue(
    redis: Redis,
    redis_url: str,
    tmp_path: Path,
    ledger: Ledger,
    failpoint: str,
    body: dict[str, object],
    resumed: int = 1,
) -> tuple[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]]:
    """The run's first worker dies at the failpoint; a second finishes it (``resumed``: from the
    first one's checkpoint, else it starts the run anew). Returns the run id and the rescuer's metrics."""
    profiles = chaos_profiles(ledger.url, tmp_path / "profiles.json")
    env = {**FAST, "AGENTMILL_PROFILES": str(profiles)}
    p = producer_for(redis, redis_url, profiles=str(profiles))  # the chaos profile: an HTTP ledger tool
    sub = await p.submit(body)
    doomed = WorkerProc(redis_url, env={**env, "AGENTMILL_FAILPOINTS": f"{failpoint}:1"}).start()
    assert wait_until(lambda: not doomed.alive, 30), f"the worker never reached {failpoint}"
    port = free_port()
    rescuer = WorkerProc(redis_url, env={**env, "AGENTMILL_WORKER_METRICS_PORT": str(port)}).start()
    try:
        rec = (await wait_all(p, [sub.run_id], 30))[sub.run_id]
        status, body_text = await asyncio.to_thread(http_get, f"http://127.0.0.1:{port}/metrics")
    finally:
        rescuer.stop()
    assert rec.status.value == "completed", rec.result
    assert status == 200
    metrics = metric_samples(body_text)
    assert metrics[("agentmill_runs_resumed_total", ())] == resumed
    assert metrics[("agentmill_runs_started_total", (("resumed", "true" if resumed else "false"),))] == 1
    return sub.run_id, metrics


async def test_a_tool_whose_worker_died_mid_call_runs_again_with_the_same_key_and_says_so(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    with Ledger() as ledger:
        run_id, metrics = await crash_then_rescue(
            redis, redis_url, tmp_path, ledger, "after_tool_effect",
            chaos_run([{"toolCalls": [{"name": "ledger", "arguments": {"step": 1}}]}, {"text": "done"}]),
        )  # fmt: skip
        counts = ledger.counts()
        tokens = dict(ledger.tokens)
    events = await stream(redis, run_id)
    assert_clean_stream(events)
    call_id = next(e.payload["toolCallId"] for e in events if e.kind == "tool_call")
    assert counts == {f"{run_id}:{call_id}": 2}  # the side effect happened twice, under one key
    assert tokens[f"{run_id}:{call_id}"] == ["1", "2"]  # with a higher fencing token the second time
    notices = [e for e in events if e.kind == "status" and e.payload["status"] == "tool_reexecuted"]
    assert [n.payload["toolCallId"] for n in notices] == [call_id]
    assert metrics[("agentmill_tool_calls_reexecuted_total", (("tool", "ledger"),))] == 1
    record = orjson.loads(await redis.hget(K.tools(run_id), call_id))
    assert record["state"] == "done" and record["attempts"] == 2
    assert [e.payload["toolCallId"] for e in events if e.kind == "tool_result"] == [call_id]


async def test_a_model_call_cut_off_after_its_deltas_were_published_is_announced_as_restarted(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    with Ledger() as ledger:
        run_id, _ = await crash_then_rescue(
            redis, redis_url, tmp_path, ledger, "after_delta_publish",
            chaos_run([{"text": "a long answer streamed in many small pieces " * 4, "delayMs": 800}]),
            resumed=0,  # cut off in its first model call: before its first checkpoint
        )  # fmt: skip
    events = await stream(redis, run_id)
    assert_clean_stream(events)
    restarts = [e for e in events if e.kind == "status" and e.payload["status"] == "model_call_restarted"]
    assert len(restarts) == 1
    # opened once (by the acquisition that first took it), though its second worker started it anew
    assert [e.seq for e in events if e.kind == "status" and e.payload["status"] == "running"] == [1]
    cut = restarts[0]
    abandoned = [e for e in events if e.kind == "model_delta" and e.seq < cut.seq]
    assert abandoned and all(e.seq > cut.payload["discardAfterSeq"] for e in abandoned)
    answers = [e for e in events if e.kind == "assistant_message"]
    assert len(answers) == 1 and answers[0].seq > cut.seq  # the call started over and answered once
