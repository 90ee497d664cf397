"""Economy runs on an ``anthropic``-kind provider end to end: real worker processes, a real Redis and
the local batch server's Message Batches (tests/support/message_batches.py). Each model call goes
into a Message Batch as the Messages request the standard lane would stream (system, tools and
cache breakpoints alike); its ``message`` resumes the run, usage (cache reads included) at the batch
price."""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

from producer.usage import read_usage
from shared.quotas import DEFAULT_TENANT
from tests.integration.helpers import assert_clean_stream, stream, wait_all
from tests.support import economy_workers
from tests.support.batch_server import BatchServer, tool_rounds_backend
from tests.support.economy_workers import died_at, economy_producer, economy_run, finished_on, procs, started
from worker.economy.wire import wire_custom_id

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

PRICES = {"inputPerMTok": 3.0, "outputPerMTok": 15.0, "cacheReadPerMTok": 0.3}


ANTHROPIC = {"kind": "anthropic", "model": "claude-test", "maxTokens": 512, "pricing": PRICES}


def profiles(tmp_path: Path, base_url: str, **economy: Any) -> Path:
    return economy_workers.profiles(tmp_path, base_url, provider=ANTHROPIC, **economy)


def sent_once(ids: list[str], calls: tuple[int, ...]) -> dict[str, int]:
    return {wire_custom_id(f"{rid}:{k}"): 1 for rid in ids for k in calls}


async def submit(redis: Redis, redis_url: str, path: Path, n: int) -> tuple[Any, list[str]]:
    p = economy_producer(redis, redis_url, path)
    return p, [(await p.submit(economy_run(i))).run_id for i in range(n)]  # type: ignore[union-attr]


async def test_anthropic_economy_runs_go_through_message_batches_once(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    async with BatchServer(
        tool_rounds_backend("echo", rounds=2, arguments={"text": "x"}), delay_s=0.2
    ) as server:
        server.messages.cache_read_tokens = 4
        path = profiles(tmp_path, server.base_url)
        p, ids = await submit(redis, redis_url, path, 20)
        recs = await finished_on(p, ids, redis_url, path)
        assert {r.status.value for r in recs.values()} == {"completed"}  # type: ignore[attr-defined]
        assert server.received == sent_once(ids, (1, 2, 3))  # Message Batches, each call once
        assert not server.batches and not server.messages.standard  # nothing on the other paths
        # the request is the standard lane's Messages body: system and tools marked for caching
        params = next(iter(server.messages.batches.values())).requests[0]["params"]
        assert params["model"] == "claude-test" and params["max_tokens"] == 512 and "stream" not in params
        assert params["system"][0]["cache_control"] == {"type": "ephemeral"}
        assert "echo" in {t["name"] for t in params["tools"]} and "cache_control" in params["tools"][-1]
        events = await stream(redis, ids[0])
        assert_clean_stream(events)
        statuses = [e.payload.get("status") for e in events if e.kind == "status"]
        assert statuses.count("awaiting_model") == 3
        assert [e.payload["content"] for e in events if e.kind == "tool_result"] == ["x", "x"]
        usage = [e.payload["usage"] for e in events if e.kind == "usage"]
        assert [u.get("lane") for u in usage] == ["economy"] * 3
        assert usage[0]["inputTokens"] == 11 and usage[0]["cacheReadTokens"] == 4
        # the batch price: half of 7 uncached input, 4 cache-read and 5 output tokens at their prices
        assert usage[0]["costUsd"] == pytest.approx((7 * 3.0 + 4 * 0.3 + 5 * 15.0) / 1e6 / 2)
        final = recs[ids[0]].result.final_assistant_message  # type: ignore[attr-defined]
        assert final.text == "done after 2 tool results" and final.thinking_blocks is None
        # GET /v1/usage's split: every call of these runs in the economy lane, none in the standard
        today = dt.datetime.now(dt.UTC).date()
        report = await read_usage(p.parts, DEFAULT_TENANT, today - dt.timedelta(days=1), today)
        eco, std = report.lanes["economy"], report.lanes["standard"]
        assert (eco.runs, eco.input_tokens, eco.cache_read_tokens) == (20, 20 * 3 * 11, 20 * 3 * 4)
        assert eco.cost_usd == pytest.approx(report.total.cost_usd) and eco.cost_usd > 0
        assert (std.runs, std.input_tokens, std.output_tokens, std.cost_usd) == (0, 0, 0, 0)


@pytest.mark.parametrize(
    "point",
    ["economy_after_creating", "economy_after_create", "economy_after_submitted", "economy_after_deliver"],
)
async def test_a_worker_killed_at_a_batcher_state_sends_no_anthropic_request_twice(
    redis: Redis, redis_url: str, tmp_path: Path, point: str
) -> None:
    async with BatchServer(
        tool_rounds_backend("echo", rounds=1, arguments={"text": "y"}), delay_s=0.1
    ) as server:
        path = profiles(tmp_path, server.base_url)
        p, ids = await submit(redis, redis_url, path, 20)
        await died_at(redis_url, path, point)
        recs = await finished_on(p, ids, redis_url, path)
        assert {r.status.value for r in recs.values()} == {"completed"}  # type: ignore[attr-defined]
        assert server.received == sent_once(ids, (1, 2))
        for rid in ids:  # no tool executed twice
            results = Counter(
                e.payload["toolCallId"] for e in await stream(redis, rid) if e.kind == "tool_result"
            )
            assert len(results) == 1 and set(results.values()) == {1}, results


async def test_an_anthropic_batch_whose_calls_all_went_standard_is_cancelled_and_they_stream_as_messages(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    async with BatchServer(tool_rounds_backend("echo", rounds=0), delay_s=60) as server:
        path = profiles(tmp_path, server.base_url, standardTimeMs=4000)
        p = economy_producer(redis, redis_url, path)
        workers = procs(redis_url, path, 1, AGENTMILL_RECONCILE_MS="200")
        try:
            await started(p, workers)
            deadline = int(time.time() * 1000) + 8000  # the switch at deadline - 4 s
            ids = [
                (await p.submit({**economy_run(i), "deadline": deadline})).run_id  # type: ignore[union-attr]
                for i in range(3)
            ]
            recs = await wait_all(p, ids, 30)
            assert int(time.time() * 1000) < deadline
            for _ in range(100):  # the batch cancelled at the provider
                if [b.status for b in server.messages.batches.values()] == ["ended"]:
                    break
                await asyncio.sleep(0.1)
        finally:
            for w in workers:
                w.stop()
        assert {r.status.value for r in recs.values()} == {"completed"}  # type: ignore[attr-defined]
        (batch,) = server.messages.batches.values()
        assert batch.cancel_initiated_at is not None and not server.answered  # long before its 60 s
        assert {r["type"] for r in batch.results.values()} == {"canceled"}
        assert server.received == sent_once(ids, (1,)) and len(server.messages.standard) == 3
        assert all(m.get("stream") for m in server.messages.standard)  # the standard lane: streamed
        for rid in ids:
            changed = [e.payload["reason"] for e in await stream(redis, rid) if e.kind == "status"
                       and e.payload.get("status") == "lane_changed"]  # fmt: skip
            assert changed == ["deadline"]
