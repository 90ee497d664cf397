"""Shared pieces of the integration tests: a producer on the test's private Redis, stream checks."""

from __future__ import annotations

import asyncio
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families
from redis.asyncio import Redis

from agentmill_client.models import RunEvent
from app.worker import worker_process
from producer.service import Producer, RunRecord
from shared import keys
from shared.events import decode_entry
from shared.fields import ScheduleField
from shared.profiles import load_profiles, profiles_from
from shared.settings import Settings
from tests.support.loop_watchdog import task_stacks
from tests.support.schema import K
from worker.process.jobs import WorkerProcess


@asynccontextmanager
async def running_worker(redis_url: str, **settings: Any) -> AsyncIterator[WorkerProcess]:
    """An in-process worker on the test's Redis, polling fast; stopped gracefully on exit."""
    settings = {"poll_delay_s": 0.02, "worker_metrics_port": -1, **settings}
    wp = worker_process(Settings(redis_url=redis_url, **settings))
    task = asyncio.create_task(wp.run())
    try:
        yield wp
    finally:
        wp.request_stop()
        try:
            await asyncio.wait_for(asyncio.shield(task), 30)
        except TimeoutError:  # where each of the loop's tasks stood, then the worker cancelled
            stacks = task_stacks()
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            raise AssertionError(
                f"the in-process worker did not stop within 30 s; the loop's tasks:\n{stacks}"
            ) from None


def producer_for(redis: Redis, redis_url: str, **settings: Any) -> Producer:
    s = Settings(redis_url=redis_url, **settings)
    return Producer(redis, settings=s, profiles=profiles_from(s.profiles))


async def stream(redis: Redis, run_id: str) -> list[RunEvent]:
    entries = await redis.xrange(K.events(run_id))
    events = [decode_entry(run_id, f) for _, f in entries]
    for (eid, _), ev in zip(entries, events, strict=True):
        assert (eid.decode() if isinstance(eid, bytes) else eid) == f"{ev.seq}-0"
    return events


def assert_clean_stream(events: list[RunEvent]) -> None:
    """seq exactly 1..n, first a status running, last a terminal status, no terminal before it."""
    assert [e.seq for e in events] == list(range(1, len(events) + 1)), [e.seq for e in events]
    assert events[0].kind == "status" and events[0].payload["status"] == "running"
    assert events[-1].terminal, events[-1]
    assert not any(e.terminal for e in events[:-1])


async def wait_all(p: Producer, run_ids: list[str], timeout_s: float) -> dict[str, RunRecord]:
    recs = await asyncio.gather(*(p.wait(r, timeout_s=timeout_s) for r in run_ids))
    out: dict[str, RunRecord] = {}
    for rid, rec in zip(run_ids, recs, strict=True):
        assert rec is not None, rid
        out[rid] = rec
    return out


async def run_with(
    redis: Redis, redis_url: str, path: Path, body: dict[str, Any], within: float = 20
) -> tuple[RunRecord, list[RunEvent]]:
    """One run of profile ``gpt`` of the profiles file ``path`` (an OpenAI-compatible server's)
    through an in-process worker: its record once ended and its stream, checked clean."""
    p = producer_for(redis, redis_url)
    p.profiles = load_profiles(str(path))
    sub = await p.submit({"agent": "gpt", **body})
    async with running_worker(redis_url, profiles=str(path)):
        rec = (await wait_all(p, [sub.run_id], within))[sub.run_id]  # type: ignore[union-attr]
    events = await stream(redis, sub.run_id)  # type: ignore[union-attr]
    assert_clean_stream(events)
    return rec, events


def script_run(script: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {
        "agent": "scripted",
        "inputMessages": [{"role": "user", "content": "go"}],
        "runtimeHints": {"script": script},
        **extra,
    }


async def until_status(redis: Redis, run_id: str, status: str, within: float = 10.0) -> None:
    """Wait for a run's status in Redis (for states that are not terminal, e.g. awaiting_human)."""
    deadline = time.monotonic() + within
    while await redis.hget(K.run(run_id), "status") != status.encode():
        if time.monotonic() > deadline:
            h = {k.decode(): v[:80] for k, v in (await redis.hgetall(K.run(run_id))).items()}
            shown = {
                k: h.get(k)
                for k in ("status", "owner", "epoch", "gen", "held", "crashes", "lastSeq", "opened")
            }
            queued = await redis.zscore(K.queue, K.job_id(run_id, int(h.get("gen") or 1)))
            raise AssertionError(
                f"run {run_id} did not reach {status} within {within} s: {shown}, its job's queue score {queued}"
            )
        await asyncio.sleep(0.05)


def metric_samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Prometheus exposition text -> {(sample name, sorted labels): value}."""
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def http_get(url: str, timeout: float = 2.0) -> tuple[int, str]:
    """A blocking GET (run it with asyncio.to_thread): status and body, error statuses included."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


async def make_due(redis: Redis, part: keys.Partition, key: str, tenant: str, at_ms: int) -> None:
    """Move a schedule's next firing to ``at_ms`` (its due set and its tenant's score there, as the
    schedule scripts keep them): an outage, or a firing due now."""
    await redis.hset(part.schedule(key), ScheduleField.NEXT_FIRE, at_ms)
    await redis.zadd(part.schedules_due(tenant), {key: at_ms})
    await redis.zadd(part.schedules_due_tenants, {tenant: at_ms}, lt=True)
