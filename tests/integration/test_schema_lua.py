"""What the Lua builds from a partition's context equals what shared/keys.py builds (real Redis Lua)."""

from __future__ import annotations

import pytest
from redis.asyncio import Redis

from shared import dispatch, index_keys, keys
from shared.clock import utc_day
from shared.fields import RunField, UsagePart, usage_field
from shared.scripts import LUA_DIR, Scripts, render
from shared.settings import Settings
from tests.support.lua_probe import prelude_probe

pytestmark = pytest.mark.integration


PROBE = """
local c = ctx()
return {run_key(ARGV[1]), stream_key(ARGV[1]), tools_key(ARGV[1]), session_key(ARGV[2]),
  worker_runs_key('w1'), worker_inbox_key('w1'), tenant_running_key(ARGV[3]),
  index_key(ARGV[3], 'meta', 'k=v'), batch_key(ARGV[3], 'b1'), job_id(ARGV[1], 1), job_id(ARGV[1], 4),
  job_payload(ARGV[1], 4, 1234), run_of_job(job_id(ARGV[1], 4)), c.session_pending .. ARGV[2],
  QUEUE, LIVE, AWAITING, WORKERS, WEBHOOKS, c.maxlen, c.retention, c.queued_check_ms, c.batch_delivery}
"""


@pytest.mark.parametrize("count, index", [(1, 0), (16, 11)])
async def test_what_the_lua_builds_equals_the_python_schema(redis: Redis, count: int, index: int) -> None:
    r = redis
    part = keys.Layout(count).parts[index]
    scripts = Scripts(r, Settings(queued_check_ms=777, stream_maxlen=55, retention_s=99))
    prelude = "".join((LUA_DIR / f"{p}.lua").read_text() for p in ("clock", "prelude"))
    probe = render(prelude + "enter_clock(KEYS, ARGV)\nenter_prelude(KEYS, ARGV)\n" + PROBE)
    assert "__" not in probe.replace("__index", "")
    k, a = scripts.frame(part, [], ["run-1", "ses-1", "acme"])
    got = [v.decode() for v in await r.eval(probe, len(k), *k, *a)]
    assert got == [
        part.run("run-1"), part.events("run-1"), part.tools("run-1"), part.session("ses-1"),
        part.worker_runs("w1"), part.worker_inbox("w1"), part.tenant_running("acme"),
        part.index_key("acme", "meta", "k=v"), part.batch("acme", "b1"), part.job_id("run-1", 1),
        part.job_id("run-1", 4), dispatch.job_payload("run-1", 4, 1234).decode(), "run-1",
        part.session_pending("ses-1"), part.queue, part.live, part.awaiting, part.workers, part.webhooks,
        "55", "99", "777", index_keys.BATCH_DELIVERY,
    ]  # fmt: skip


# 1970-01-01, a leap day and the day after it, the last ms of a year and the first of the next,
# 2100-02-28 and the day after it (2100 is no leap year), an instant with milliseconds.
USAGE_TIMES = [0, 951_782_400_000, 951_868_800_000, 1_767_225_599_999, 1_767_225_600_000,
               4_107_456_000_000, 4_107_542_400_000, 1_780_000_000_123]  # fmt: skip


@pytest.mark.parametrize("count, index", [(1, 0), (16, 11)])
async def test_a_usage_tally_from_lua_lands_where_the_report_reads_it(
    redis: Redis, count: int, index: int
) -> None:
    """usage_add (prelude.lua; an ending from outside a worker) adds to the tenant's usage hash of the
    UTC day of its time: the one keys.Partition.usage_day names, with shared.fields.usage_field's fields."""
    part = keys.Layout(count).parts[index]
    scripts = Scripts(redis, Settings(usage_retention_days=3))
    run = part.run("run-1")
    await redis.hset(run, mapping={RunField.TENANT: "acme", RunField.AGENT: "small"})
    probe = prelude_probe(
        "usage_add(KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], tonumber(ARGV[6]))"
    )
    want = dict(zip(UsagePart, (b"120", b"7", b"123456", b"1", b"90", b"30"), strict=True))
    for ts in USAGE_TIMES:
        k, a = scripts.frame(part, [run], ["120", "7", "0.000123456", "90", "30", ts])
        await redis.eval(probe, len(k), *k, *a)
        key = part.usage_day("acme", utc_day(ts))
        assert keys.slot_of(key) == part.slot  # the run's slot: a script on the partition may touch it
        assert await redis.hgetall(key) == {usage_field("small", w).encode(): v for w, v in want.items()}, ts
        assert 3 * 86_400 - 5 < await redis.ttl(key) <= 3 * 86_400
    assert len(await redis.keys(part.usage_day("acme", "*"))) == len(USAGE_TIMES)
    # As commit.lua: only what a run adds (no cost without prices, no output tokens when none); the
    # expiry is set by the run that adds a new field (the day's first of an agent), not by the next.
    key = part.usage_day("acme", utc_day(USAGE_TIMES[-1]))
    await redis.expire(key, 100)
    k, a = scripts.frame(part, [run], ["5", "0", "", "", "", USAGE_TIMES[-1]])
    for agent, renewed in (("free", True), ("free", False), ("small", False)):
        await redis.hset(run, RunField.AGENT, agent)
        await redis.eval(probe, len(k), *k, *a)
        ttl = await redis.ttl(key)
        assert ttl > 3 * 86_400 - 5 if renewed else 0 < ttl <= 100, (agent, ttl)
        await redis.expire(key, 100)
    got = {f.decode(): v.decode() for f, v in (await redis.hgetall(key)).items()}
    assert got == {"small|in": "125", "small|out": "7", "small|cost": "123456", "small|runs": "2",
                   "small|cr": "90", "small|cw": "30", "free|in": "10", "free|runs": "2"}  # fmt: skip
