"""A tenant disabled by its quota ("disabled": true) after its runs were submitted, over a real Redis
and a real worker process: each of its runs is aborted when a worker with that quota takes it up
(the reason naming the quota), a parked parent too when its child ends, and a sub-agent its run
would start is refused with an error result (no run made)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
import pytest
from redis.asyncio import Redis

from shared import children as kids
from shared.quotas import Quota
from tests.integration.helpers import producer_for, wait_all
from tests.integration.test_subagents import ask, boss_run, profiles
from tests.support.procs import WorkerProc
from tests.support.schema import K

pytestmark = pytest.mark.integration

DISABLED = orjson.dumps({"default": {"disabled": True}}).decode()
REASON = 'tenant default is disabled ("disabled": true in AGENTMILL_TENANT_QUOTAS)'


async def _status(redis: Redis, run_id: str) -> str:
    return ((await redis.hget(K.run(run_id), "status")) or b"").decode()


async def test_a_disabled_tenants_queued_and_parked_runs_are_aborted_naming_the_quota(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    path = profiles(tmp_path, child_sleep_ms=1500)
    p = producer_for(redis, redis_url, profiles=path)  # submitted before the tenant was disabled
    # A parent parked on its child, on a worker of the old quotas.
    old = WorkerProc(redis_url, env={"AGENTMILL_PROFILES": path}, log=tmp_path / "old.log").start()
    try:
        parent = await p.submit(boss_run([ask("a"), {"echoContext": True}]))
        for _ in range(400):
            if await _status(redis, parent.run_id) == "awaiting_children":
                break
            await asyncio.sleep(0.025)
        assert await _status(redis, parent.run_id) == "awaiting_children"
    finally:
        old.stop()  # its child, running, is handed back or finished
    queued = await p.submit(boss_run([{"text": "never said"}]))
    new = WorkerProc(
        redis_url,
        env={"AGENTMILL_PROFILES": path, "AGENTMILL_TENANT_QUOTAS": DISABLED},
        log=tmp_path / "new.log",
    ).start()
    try:
        recs = await wait_all(p, [queued.run_id, parent.run_id], 60)
    finally:
        new.stop()
    for rec in recs.values():
        assert rec.status.value == "aborted", rec
        assert rec.result is not None and rec.result.last_error is not None
        assert REASON in rec.result.last_error.message, rec.result.last_error
    assert recs[queued.run_id].result.final_assistant_message is None  # type: ignore[union-attr]


async def test_a_disabled_tenants_sub_agents_are_refused_with_an_error_and_none_is_made(
    redis: Redis, redis_url: str
) -> None:
    p = producer_for(redis, redis_url)
    specs = [kids.ChildSpec(f"call-{i}", f"child-{i}", "default", "task") for i in range(3)]
    got = await kids.spawn(p.parts, p.scripts, parent_id="parent", tenant="", lineage=b"", specs=specs,
                           quota=Quota(disabled=True))  # fmt: skip
    assert set(got) == {"call-0", "call-1", "call-2"}
    for spawned in got.values():
        assert not spawned.created and spawned.error.startswith(
            "sub-agent refused: tenant default is disabled"
        )
    assert [k async for k in redis.scan_iter(match=K.run("child-*"))] == []
    # the same children with the tenant enabled are made
    made = await kids.spawn(p.parts, p.scripts, parent_id="parent", tenant="", lineage=b"", specs=specs,
                            quota=Quota())  # fmt: skip
    assert all(s.created for s in made.values()), made
