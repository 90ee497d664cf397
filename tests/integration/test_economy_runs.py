"""Economy runs end to end: real worker processes, a real Redis and the local batch server. Each
model call goes into a provider batch while its run waits on no worker; the batch's answer resumes
the run, whose tool round continues on any worker."""

from __future__ import annotations

import asyncio
import base64
import os
import time
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest
from redis.asyncio import Redis

from shared import payload_crypto
from tests.integration.helpers import (
    assert_clean_stream,
    http_get,
    metric_samples,
    stream,
    until_status,
    wait_all,
)
from tests.integration.test_deletion import redis_traces
from tests.support.batch_server import BatchServer, Plan, chat_completion, tool_rounds_backend
from tests.support.economy_workers import (
    died_at,
    economy_producer,
    economy_run,
    finished_on,
    procs,
    profiles,
    started,
)
from tests.support.redis_server import free_port
from tests.support.schema import K

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


async def test_economy_runs_go_through_batches_exactly_once_on_two_workers(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    n = 100
    async with BatchServer(
        tool_rounds_backend("echo", rounds=2, arguments={"text": "x"}), delay_s=0.2
    ) as server:
        path = profiles(tmp_path, server.base_url)
        p = economy_producer(redis, redis_url, path)
        # a standard run of the same profile first: its configuration is not the economy runs'
        std = [(await p.submit({**economy_run(-1), "lane": "standard"})).run_id]  # type: ignore[union-attr]
        workers = procs(redis_url, path, 2)
        await wait_all(p, std, 30)
        ids = [(await p.submit(economy_run(i))).run_id for i in range(n)]  # type: ignore[union-attr]
        try:
            recs = await wait_all(p, ids, 90)
        finally:
            for w in workers:
                w.stop()
        assert {r.status.value for r in recs.values()} == {"completed"}  # type: ignore[attr-defined]
        # 3 model calls a run, each sent to the provider once, by its custom_id
        assert server.received == {f"{rid}:{k}": 1 for rid in ids for k in (1, 2, 3)}
        rid = ids[0]
        events = await stream(redis, rid)
        assert_clean_stream(events)
        statuses = [e.payload.get("status") for e in events if e.kind == "status"]
        assert statuses.count("awaiting_model") == 3
        assert [e.payload["content"] for e in events if e.kind == "tool_result"] == ["x", "x"]
        usage = [e.payload["usage"] for e in events if e.kind == "usage"]
        assert [u.get("lane") for u in usage] == ["economy"] * 3
        # the batch price: half of 11 input and 5 output tokens at $1 and $2 per million
        assert usage[0]["costUsd"] == pytest.approx((11 * 1.0 + 5 * 2.0) / 1e6 / 2)
        for r in ids:  # no tool executed twice
            evs = await stream(redis, r)
            assert sum(1 for e in evs if e.kind == "tool_result") == 2
            assert not any(e.kind == "status" and e.payload.get("status") == "tool_reexecuted" for e in evs)


@pytest.mark.parametrize(
    "point",
    ["economy_after_create", "economy_after_upload", "economy_after_deliver", "after_economy_enqueue"],
)
async def test_a_worker_killed_at_a_failpoint_hands_over_and_nothing_is_sent_twice(
    redis: Redis, redis_url: str, tmp_path: Path, point: str
) -> None:
    n = 30
    async with BatchServer(
        tool_rounds_backend("echo", rounds=1, arguments={"text": "y"}), delay_s=0.1
    ) as server:
        path = profiles(tmp_path, server.base_url)
        p = economy_producer(redis, redis_url, path)
        ids = [(await p.submit(economy_run(i))).run_id for i in range(n)]  # type: ignore[union-attr]
        # the first worker dies at the point (after_create: the batch exists, its id is not kept)
        await died_at(redis_url, path, point)
        recs = await finished_on(p, ids, redis_url, path)
        assert {r.status.value for r in recs.values()} == {"completed"}  # type: ignore[attr-defined]
        assert server.received == {f"{rid}:{k}": 1 for rid in ids for k in (1, 2)}


async def test_a_standard_run_starts_at_once_while_economy_runs_wait(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    async with BatchServer(tool_rounds_backend("echo", rounds=0), delay_s=30) as server:
        path = profiles(tmp_path, server.base_url)
        p = economy_producer(redis, redis_url, path)
        eco = [(await p.submit(economy_run(i))).run_id for i in range(20)]  # type: ignore[union-attr]
        port = free_port()
        workers = procs(redis_url, path, 1, AGENTMILL_MAX_JOBS="4", AGENTMILL_WORKER_METRICS_PORT=str(port))
        try:
            for rid in eco:
                await until_status(redis, rid, "awaiting_model", within=30)
            while len(server.received) < 20:  # all sent, the batch in progress at the provider
                await asyncio.sleep(0.05)
            t0 = time.monotonic()
            std = await p.submit({"agent": "std", "inputMessages": [{"role": "user", "content": "now"}]})
            rec = (await wait_all(p, [std.run_id], 10))[std.run_id]  # type: ignore[union-attr]
            assert rec.status.value == "completed"  # type: ignore[attr-defined]
            assert time.monotonic() - t0 < 5  # 20 parked economy runs hold none of the 4 slots
            assert await redis.hget(K.run(eco[0]), "status") == b"awaiting_model"
            await asyncio.sleep(0.5)  # the batcher's next pass
            samples = metric_samples(http_get(f"http://127.0.0.1:{port}/metrics")[1])
            states = {
                dict(lb)["state"]: v
                for (name, lb), v in samples.items()
                if name == "agentmill_economy_batches"
            }
            assert states == {"closed": 0, "creating": 0, "submitted": 1}
            pending = [v for (name, _), v in samples.items() if name == "agentmill_economy_requests_pending"]
            assert pending == [0]
            rec0 = await p.get(eco[0])
            assert rec0 is not None
            wait = rec0.view()["economyWait"]  # what GET /v1/runs/{id} shows
            assert wait["customId"] == f"{eco[0]}:1" and wait["batchState"] == "submitted"
            assert wait["providerBatchId"] in server.batches
        finally:
            for w in workers:
                w.stop()
        assert len(server.received) == 20


async def test_with_data_keys_the_request_lines_and_the_answers_are_sealed_at_rest(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    """A call's request line waits in Redis and its batch's answer is kept with the run: both hold
    the run's content, so both are sealed (the batcher opens a line to upload it, the run its answer)."""
    mark = "ECON-SECRET-7f3a"
    key = f"k1:{base64.b64encode(os.urandom(32)).decode()}"
    payload_crypto.install(key)  # the producer in this process seals the input as the API would
    try:

        async def answer(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
            return 200, chat_completion(str(body["model"]), text=f"{mark} answered")

        async with BatchServer(answer, delay_s=1.0) as server:
            path = profiles(tmp_path, server.base_url)
            p = economy_producer(redis, redis_url, path)
            ids = [
                (
                    await p.submit(
                        {**economy_run(i), "inputMessages": [{"role": "user", "content": f"{mark} {i}"}]}
                    )
                ).run_id  # type: ignore[union-attr]
                for i in range(3)
            ]
            workers = procs(redis_url, path, 1, AGENTMILL_DATA_KEYS=key)
            try:
                while len(server.received) < 3:  # the lines uploaded, still kept until answered
                    await asyncio.sleep(0.05)
                assert await redis_traces(redis, [mark]) == []
                recs = await wait_all(p, ids, 60)
            finally:
                for w in workers:
                    w.stop()
            assert {r.status.value for r in recs.values()} == {"completed"}  # type: ignore[attr-defined]
            assert server.received == {f"{rid}:1": 1 for rid in ids}  # opened to be sent
            assert await redis_traces(redis, [mark]) == []  # the answers kept with the runs: sealed
            assert any(
                mark in str(payload_crypto.open_bytes(v))
                for v in (await redis.hgetall(K.run(ids[0]))).values()
            )
    finally:
        payload_crypto.install(None)


async def test_an_expired_batch_sends_its_calls_to_the_standard_lane(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    backend = tool_rounds_backend("echo", rounds=0)
    async with BatchServer(backend, plans=[Plan(outcome="expired", answered=0)]) as server:
        path = profiles(tmp_path, server.base_url)
        p = economy_producer(redis, redis_url, path)
        rid = (await p.submit(economy_run(0))).run_id  # type: ignore[union-attr]
        port = free_port()
        workers = procs(redis_url, path, 1, AGENTMILL_WORKER_METRICS_PORT=str(port))
        try:
            rec = (await wait_all(p, [rid], 30))[rid]
            samples = metric_samples(http_get(f"http://127.0.0.1:{port}/metrics")[1])
            assert samples[("agentmill_lane_changes_total", (("reason", "expired"),))] == 1
        finally:
            for w in workers:
                w.stop()
        assert rec.status.value == "completed"  # type: ignore[attr-defined]
        events = await stream(redis, rid)
        changed = [
            e.payload for e in events if e.kind == "status" and e.payload.get("status") == "lane_changed"
        ]
        assert [c["reason"] for c in changed] == ["expired"]
        assert server.received == {f"{rid}:1": 1} and len(server.standard) == 1
        usage = [e.payload["usage"] for e in events if e.kind == "usage"]
        assert [u.get("lane") for u in usage] == [None]  # the standard lane's call, at the standard price
        assert usage[0]["costUsd"] == pytest.approx((11 * 1.0 + 5 * 2.0) / 1e6)


def discarded_late(samples: dict[Any, float]) -> float:
    """Answers discarded as late: the call had gone standard, or the run had ended."""
    return sum(
        v
        for (name, lb), v in samples.items()
        if name == "agentmill_economy_answers_discarded_total" and dict(lb)["reason"] in ("late", "finished")
    )


async def test_a_deadline_with_the_batch_pending_completes_on_the_standard_lane_and_the_late_answer_changes_nothing(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    # the switch to the standard lane at 3 s, the batch's answer at 6.5 s: late by 3.5 s
    async with BatchServer(tool_rounds_backend("echo", rounds=0), delay_s=6.5) as server:
        path = profiles(tmp_path, server.base_url, standardTimeMs=3000)
        p = economy_producer(redis, redis_url, path)
        port = free_port()
        workers = procs(
            redis_url, path, 1, AGENTMILL_RECONCILE_MS="200", AGENTMILL_WORKER_METRICS_PORT=str(port)
        )
        try:
            await started(p, workers)
            deadline = int(time.time() * 1000) + 6000  # the switch at deadline - 3 s
            rid = (await p.submit({**economy_run(0), "deadline": deadline})).run_id  # type: ignore[union-attr]
            # a run in the same batch that waits for it: the batch is not cancelled, the provider answers both
            other = (await p.submit(economy_run(1))).run_id  # type: ignore[union-attr]
            rec = (await wait_all(p, [rid], 30))[rid]
            done_ms = int(time.time() * 1000)
            assert done_ms < deadline, done_ms - deadline  # done before its deadline
            before = await stream(redis, rid)
            (await wait_all(p, [other], 30))[other]  # the provider answered the batch, late for rid
            samples = metric_samples(http_get(f"http://127.0.0.1:{port}/metrics")[1])
        finally:
            for w in workers:
                w.stop()
        assert rec.status.value == "completed"  # type: ignore[attr-defined]
        changed = [
            e.payload for e in before if e.kind == "status" and e.payload.get("status") == "lane_changed"
        ]
        assert [c["reason"] for c in changed] == ["deadline"]
        assert server.received == {f"{rid}:1": 1, f"{other}:1": 1} and len(server.standard) == 1
        assert [b.status for b in server.batches.values()] == ["completed"]
        assert await stream(redis, rid) == before  # the late answer changed nothing
        assert await redis.hget(K.run(rid), "modelReply") is None  # discarded, not kept
        discarded = {
            dict(lb)["reason"]: v
            for (name, lb), v in samples.items()
            if name == "agentmill_economy_answers_discarded_total"
        }
        # late: it reached the run after its call went standard (finished: after the run ended)
        assert discarded["late"] + discarded["finished"] == 1
        assert discarded["duplicate"] == discarded["unknown_run"] == 0


async def test_a_batch_whose_every_request_left_for_the_standard_lane_is_cancelled_at_the_provider(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    async with BatchServer(tool_rounds_backend("echo", rounds=0), delay_s=60) as server:
        path = profiles(tmp_path, server.base_url, standardTimeMs=4000)
        p = economy_producer(redis, redis_url, path)
        port = free_port()
        workers = procs(
            redis_url, path, 1, AGENTMILL_RECONCILE_MS="200", AGENTMILL_WORKER_METRICS_PORT=str(port)
        )
        try:
            await started(p, workers)
            deadline = int(time.time() * 1000) + 8000
            ids = [
                (await p.submit({**economy_run(i), "deadline": deadline})).run_id  # type: ignore[union-attr]
                for i in range(3)
            ]
            recs = await wait_all(p, ids, 30)
            assert int(time.time() * 1000) < deadline
            for _ in range(100):  # cancelled at the provider, its cancelled lines delivered and discarded
                samples = metric_samples(http_get(f"http://127.0.0.1:{port}/metrics")[1])
                if discarded_late(samples) == 3:
                    break
                await asyncio.sleep(0.1)
        finally:
            for w in workers:
                w.stop()
        assert {r.status.value for r in recs.values()} == {"completed"}  # type: ignore[attr-defined]
        assert [b.status for b in server.batches.values()] == ["cancelled"]  # long before its 60 s
        assert server.received == {f"{rid}:1": 1 for rid in ids} and len(server.standard) == 3
        assert not server.answered  # the provider answered none of them
        cancelled = [
            v for (name, _), v in samples.items() if name == "agentmill_economy_batches_cancelled_total"
        ]
        assert cancelled == [1]
        assert discarded_late(samples) == 3
        left = [k async for k in redis.scan_iter(match="am:e:*")]
        assert not [k for k in left if not k.endswith((b":seq", b":lease"))], left  # nothing left behind


async def test_a_tenants_cost_per_day_counts_economy_calls_at_the_batch_price(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    from shared.clock import now_ms, utc_day
    from shared.fields import BudgetField

    async with BatchServer(tool_rounds_backend("echo", rounds=1, arguments={"text": "z"})) as server:
        path = profiles(tmp_path, server.base_url)
        p = economy_producer(redis, redis_url, path)
        ids = [(await p.submit(economy_run(i))).run_id for i in range(5)]  # type: ignore[union-attr]
        quotas = orjson.dumps({"default": {"costUsdPerDay": 1.0}}).decode()
        workers = procs(redis_url, path, 1, AGENTMILL_TENANT_QUOTAS=quotas)
        try:
            recs = await wait_all(p, ids, 60)
        finally:
            for w in workers:
                w.stop()
        assert {r.status.value for r in recs.values()} == {"completed"}  # type: ignore[attr-defined]
        raw = await redis.hgetall(K.tenant_budget("default", utc_day(now_ms())))
        b = {k.decode(): int(v) for k, v in raw.items()}
        # 10 calls of 11 + 5 tokens at half of $1 and $2 per million tokens, in nano-USD
        assert b[BudgetField.SPENT_COST] == 10 * (11 * 1 + 5 * 2) * 1000 // 2
        assert b[BudgetField.SPENT_TOKENS] == 10 * 16
        run_costs = [r.result.usage.cost_usd for r in recs.values()]  # type: ignore[attr-defined]
        assert sum(run_costs) == pytest.approx(b[BudgetField.SPENT_COST] / 1e9)


async def chaos(redis: Redis, redis_url: str, tmp_path: Path, n: int, within: float) -> None:
    """``n`` economy runs of 3 model calls and 2 tool calls on 2 workers, each worker dying (SIGKILL)
    now and then at the batcher's durable states and restarted: all complete, the provider got each
    call once, every tool call's result recorded once."""
    points = ",".join(
        f"{name}:{p}" for name, p in (("economy_after_upload", 0.25), ("economy_after_creating", 0.25),
                                      ("economy_after_create", 0.25), ("economy_after_submitted", 0.25),
                                      ("economy_after_results", 0.25), ("economy_after_deliver", 0.001),
                                      ("after_economy_enqueue", 0.001))
    )  # fmt: skip
    async with BatchServer(
        tool_rounds_backend("echo", rounds=2, arguments={"text": "c"}), delay_s=0.2
    ) as server:
        path = profiles(tmp_path, server.base_url)
        p = economy_producer(redis, redis_url, path)
        ids = [s.run_id for s in await p.submit_many([economy_run(i) for i in range(n)])]  # type: ignore[union-attr]
        # a run whose worker dies more often than this would be quarantined (poison_run): not the point here
        env = {"AGENTMILL_LEASE_MS": "2000", "AGENTMILL_RECONCILE_MS": "300", "AGENTMILL_FAILPOINTS": points,
               "AGENTMILL_ECONOMY_BATCH_REQUESTS": "100", "AGENTMILL_MAX_RUN_CRASHES": "1000"}  # fmt: skip
        workers = procs(redis_url, path, 2, **env)
        kills = 0
        waiting = asyncio.ensure_future(wait_all(p, ids, within))
        try:
            while not waiting.done():
                for i, w in enumerate(workers):
                    if not w.alive:  # killed at a failpoint: a new process takes its place
                        kills += 1
                        workers[i] = procs(redis_url, path, 1, **env)[0]
                await asyncio.wait([waiting], timeout=0.2)
            recs = waiting.result()
        finally:
            for w in workers:
                w.stop()
        assert kills > 0
        print(f"chaos: {n} runs, {kills} workers killed, {len(server.batches)} batches")
        assert {r.status.value for r in recs.values()} == {"completed"}  # type: ignore[attr-defined]
        assert server.received == {f"{rid}:{k}": 1 for rid in ids for k in (1, 2, 3)}
        for rid in ids:
            results = Counter(
                e.payload["toolCallId"] for e in await stream(redis, rid) if e.kind == "tool_result"
            )
            assert len(results) == 2 and set(results.values()) == {1}, results


async def test_economy_runs_with_workers_killed_at_the_batchers_states(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    await chaos(redis, redis_url, tmp_path, 100, 110)


@pytest.mark.slow
@pytest.mark.timeout(900)
async def test_a_thousand_economy_runs_with_workers_killed_at_the_batchers_states(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    await chaos(redis, redis_url, tmp_path, 1000, 800)
