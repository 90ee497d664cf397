"""Lanes: priorities, aging, a held-back run keeping its place, runs at a time, against a
real Redis and a real worker."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from redis.asyncio import Redis

from agentmill_client import AsyncClient, RunInput
from producer.listing import Catalog, RunFilter
from shared.clock import now_ms
from shared.quotas import DEFAULT_TENANT
from shared.settings import Settings
from tests.integration.api_support import A, B, api, body, settings
from tests.integration.helpers import (
    metric_samples,
    producer_for,
    running_worker,
    script_run,
    stream,
    until_status,
    wait_all,
)
from tests.support.cli import cli
from tests.support.schema import K, stored

pytestmark = pytest.mark.integration


def kept(run_id: str, tenant: str = "tenant-b") -> str:
    """The id a named tenant's run is kept under in Redis."""
    return stored(Settings(), tenant, run_id)


async def started_at(redis: Redis, run_id: str) -> int:
    """When the run's first attempt started: its first event's time (status running)."""
    events = await stream(redis, run_id)
    assert events and events[0].payload["status"] == "running", events[:1]
    return events[0].ts


async def start_order(redis: Redis, ids: list[str]) -> list[str]:
    at = {rid: await started_at(redis, rid) for rid in ids}
    return sorted(ids, key=lambda r: (at[r], ids.index(r)))


async def test_due_runs_start_highest_priority_first_fifo_within_one(redis: Redis, redis_url: str) -> None:
    p = producer_for(redis, redis_url)
    priorities = [2, 5, 8, 2, None, 8, 0, 9, 5]
    ids = []
    for n, prio in enumerate(priorities):
        extra: dict[str, Any] = {} if prio is None else {"priority": prio}
        # each run takes 30 ms, so their start times (ms) tell their order
        ids.append((await p.submit(script_run([{"text": f"run {n}", "delayMs": 30}], **extra))).run_id)
        await asyncio.sleep(0.003)  # FIFO is by the millisecond (the same one: run-id order, docs/api.md)
    async with running_worker(redis_url, max_jobs=1):
        await wait_all(p, ids, 30)
    order = await start_order(redis, ids)
    lane = [5 if x is None else x for x in priorities]
    expected = sorted(ids, key=lambda r: (-lane[ids.index(r)], ids.index(r)))
    assert order == expected, [(ids.index(r), priorities[ids.index(r)]) for r in order]
    assert [(await p.get(r)).view()["priority"] for r in ids] == [
        x if x is not None else 5 for x in priorities
    ]  # type: ignore[union-attr]
    assert await redis.hgetall(K.depth) in ({}, {str(x).encode(): b"0" for x in {2, 5, 8, 0, 9}})


async def test_aging_a_run_that_waited_longer_goes_before_higher_priority_runs(
    redis: Redis, redis_url: str
) -> None:
    # Aging quantum 100 ms: a priority-2 run waiting 600 ms (6 quanta) longer than a priority-8 run
    # is level with it; at 700 ms it goes first. A priority-2 run submitted with the priority-8
    # runs goes after them.
    p = producer_for(redis, redis_url, priority_aging_ms=100)
    old = (await p.submit(script_run([{"text": "old"}], priority=2))).run_id
    await asyncio.sleep(0.75)
    hi1 = (await p.submit(script_run([{"text": "hi 1"}], priority=8))).run_id
    await asyncio.sleep(0.003)  # hi1 and hi2 in different milliseconds: the same one is run-id order
    low = (await p.submit(script_run([{"text": "low"}], priority=2))).run_id
    await asyncio.sleep(0.003)
    hi2 = (await p.submit(script_run([{"text": "hi 2"}], priority=8))).run_id
    ids = [old, hi1, low, hi2]
    async with running_worker(redis_url, max_jobs=1, priority_aging_ms=100):
        await wait_all(p, ids, 30)
    assert await start_order(redis, ids) == [old, hi1, hi2, low]


async def test_a_run_held_back_by_its_tenants_running_cap_keeps_its_place(
    redis: Redis, redis_url: str
) -> None:
    # Tenant B may run 1 run at once. b2 is submitted while b1 runs and is held back for several
    # polls; b3…b6 come later. b2 must still start next (before: it was re-scored 500 ms later at
    # each poll, so the runs submitted after it overtook it), and the running set keeps no
    # finished run.
    p = producer_for(redis, redis_url)
    slow = [{"text": "slow", "delayMs": 400}]
    # b1 runs long enough that b2 is surely held while it runs, however loaded the machine
    b1 = (await p.submit(script_run([{"text": "first", "delayMs": 1500}]), tenant="tenant-b")).run_id
    async with running_worker(redis_url, max_jobs=10, tenant_max_running=1):
        await until_status(redis, kept(b1), "running")
        b2 = (await p.submit(script_run(slow), tenant="tenant-b")).run_id
        await asyncio.sleep(0.25)  # a dozen polls with b2 held back
        assert await redis.zscore(K.tenant_held("tenant-b"), K.job_id(kept(b2), 1)) is not None
        later = []
        for _ in range(4):  # a few ms apart: runs submitted in the same ms are in id order
            later.append((await p.submit(script_run(slow), tenant="tenant-b")).run_id)
            await asyncio.sleep(0.005)
        ids = [b1, b2, *later]
        for r in ids:
            rec = await p.wait(r, timeout_s=30, tenant="tenant-b")
            assert rec is not None and rec.status == "completed", r
        assert await redis.zcard(K.tenant_running("tenant-b")) == 0  # pruned as each run ended
        assert await redis.zcard(K.tenant_held("tenant-b")) == 0
    keys_ = [kept(r) for r in ids]
    assert await start_order(redis, keys_) == keys_
    starts = [await started_at(redis, r) for r in keys_]
    ends = [int((await redis.hget(K.run(r), "finishedAt")) or 0) for r in keys_]
    assert all(s >= e for s, e in zip(starts[1:], ends, strict=False))  # never two at once


async def test_a_run_at_a_time_stays_scheduled_then_runs(redis: Redis, redis_url: str) -> None:
    p = producer_for(redis, redis_url)
    at = now_ms() + 4000
    async with running_worker(redis_url, max_jobs=5):
        s = await p.submit(script_run([{"text": "on time"}], runAt=at))
        assert s.status == "scheduled"
        now = (await p.submit(script_run([{"text": "now"}]))).run_id
        await wait_all(p, [now], 10)
        rec = await p.get(s.run_id)
        assert rec is not None and rec.status == "scheduled" and rec.view()["runAt"] == at
        runs, _ = await Catalog(p).list_runs(DEFAULT_TENANT, RunFilter(status="scheduled"))
        assert [(r["runId"], r["runAt"]) for r in runs] == [(s.run_id, at)]
        done = (await wait_all(p, [s.run_id], 20))[s.run_id]
    assert done.status == "completed"
    assert await started_at(redis, s.run_id) >= at
    assert await redis.zcard(K.scheduled) == 0


async def test_a_scheduled_run_can_be_aborted_and_leaves_nothing_queued(redis: Redis, redis_url: str) -> None:
    p = producer_for(redis, redis_url)
    s = await p.submit(script_run([{"text": "never"}], runAt=now_ms() + 60_000, priority=7))
    assert await redis.zcard(K.scheduled) == 1
    assert await p.abort(s.run_id) == "aborted"
    rec = await p.get(s.run_id)
    assert rec is not None and rec.status == "aborted"
    assert await redis.zcard(K.scheduled) == 0 and not await redis.exists(K.job_key(K.job_id(s.run_id, 1)))
    # a queued one leaves the queue and its priority's depth the same way
    q = await p.submit(script_run([{"text": "never"}], priority=7))
    assert await redis.hget(K.depth, "7") == b"1"
    assert await p.abort(q.run_id) == "aborted"
    assert await redis.zcard(K.queue) == 0 and await redis.hget(K.depth, "7") == b"0"


async def test_priority_and_run_at_through_the_api_with_tenant_isolation(redis_url: str) -> None:
    quotas = orjson.dumps({"tenant-b": {"maxPriority": 3}}).decode()
    at = now_ms() + 60_000
    async with (
        api(settings(redis_url, tenant_quotas=quotas)) as url,
        httpx.AsyncClient(base_url=url, headers=A) as ca,
        httpx.AsyncClient(base_url=url, headers=B) as cb,
    ):
        r = await ca.post("/v1/runs", json=body(priority=8))
        assert r.status_code == 202, r.text
        a_run = r.json()["runId"]
        when = "2099-01-31T09:00:00Z"
        r = await ca.post("/v1/runs", json=body(runAt=when))
        assert r.status_code == 202, r.text
        a_sched = r.json()["runId"]
        b_run = (await cb.post("/v1/runs", json=body(priority=9))).json()["runId"]
        b_sched = (await cb.post("/v1/runs", json=body(runAt=at))).json()["runId"]
        assert (await ca.get(f"/v1/runs/{a_run}")).json()["priority"] == 8
        view = (await ca.get(f"/v1/runs/{a_sched}")).json()
        assert view["status"] == "scheduled" and view["runAt"] == 4073533200000, view
        assert (await cb.get(f"/v1/runs/{b_run}")).json()["priority"] == 3  # capped by its quota
        listed = (await cb.get("/v1/runs", params={"status": "scheduled"})).json()["runs"]
        assert [(x["runId"], x["runAt"]) for x in listed] == [(b_sched, at)]
        # another tenant's scheduled run is not there for it
        assert (await ca.get(f"/v1/runs/{b_sched}")).status_code == 404
        assert (await ca.post(f"/v1/runs/{b_sched}/abort")).status_code == 404
        bad = await ca.post("/v1/runs", json=body(priority=10))
        assert bad.status_code == 422 and "priority" in bad.text
        bad = await ca.post("/v1/runs", json=body(runAt="soon"))
        assert bad.status_code == 422 and "runAt" in bad.text
        samples = metric_samples((await ca.get("/metrics")).text)
        assert samples[("agentmill_queue_depth_by_priority", (("priority", "8"),))] == 1
        assert samples[("agentmill_queue_depth_by_priority", (("priority", "3"),))] == 1
        assert samples[("agentmill_queue_depth", ())] == 2
        assert samples[("agentmill_runs_scheduled", ())] == 2
        assert (await cb.post(f"/v1/runs/{b_sched}/abort")).status_code == 200
        assert (await cb.get(f"/v1/runs/{b_sched}")).json()["status"] == "aborted"
        # the Python client takes them too (runAt as an aware datetime)
        async with AsyncClient(url, token="tok-a") as client:
            when_dt = datetime(2099, 1, 31, 9, tzinfo=UTC)
            sent = await client.submit(RunInput.model_validate(body(priority=1, runAt=when_dt)))
            seen = await client.get(sent.run_id)
            assert (seen.status, seen.priority, seen.run_at) == ("scheduled", 1, 4073533200000)


async def test_cli_submit_takes_priority_and_run_at(redis: Redis, redis_url: str, tmp_path: Path) -> None:
    f = tmp_path / "runs.jsonl"
    f.write_bytes(b"\n".join(orjson.dumps(script_run([{"text": "x"}], **e)) for e in ({}, {"priority": 1})))
    env = {"AGENTMILL_CLI_STATE_DIR": str(tmp_path / "state")}
    args = ("submit", str(f), "--priority", "8", "--run-at", "2099-01-31T09:00:00+01:00")
    done = await asyncio.to_thread(cli, redis_url, *args, env=env)
    assert done.returncode == 0, done.stderr
    assert "--priority 8 --run-at 4073529600000" in done.stderr.replace(
        "\n", ""
    )  # the resume line repeats them
    jobs = await redis.zrange(K.scheduled, 0, -1, withscores=True)
    runs = [j.decode()[len(K.tag) :] for j, _ in jobs]
    assert sorted([int(await redis.hget(K.run(r), "priority") or 0) for r in runs]) == [1, 8]
    assert {int(s) for _, s in jobs} == {4073529600000}
    bad = await asyncio.to_thread(cli, redis_url, "submit", str(f), "--run-at", "soon", env=env)
    assert bad.returncode == 2 and "--run-at" in bad.stderr


async def test_a_held_job_whose_tenant_runs_nothing_goes_back_to_the_queue(
    redis: Redis, redis_url: str
) -> None:
    # A job held back under a cap that has since been lifted, with none of its tenant's runs
    # running: no ending will put it back, so the reconciler's check of the queued run does.
    p = producer_for(redis, redis_url, queued_check_ms=300)
    rid = (await p.submit(script_run([{"text": "held"}]), tenant="tenant-b")).run_id
    jid = K.job_id(kept(rid), 1)
    score = await redis.zscore(K.queue, jid)
    assert score is not None and await redis.zrem(K.queue, jid) == 1
    await redis.zadd(K.tenant_held("tenant-b"), {jid: score})
    async with running_worker(redis_url, queued_check_ms=300, reconcile_ms=200):
        rec = await p.wait(rid, timeout_s=15, tenant="tenant-b")
    assert rec is not None and rec.status == "completed"
    assert await redis.zcard(K.tenant_held("tenant-b")) == 0
