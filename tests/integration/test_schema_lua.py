"""What the Lua builds from a partition's context equals what shared/keys.py builds (real Redis Lua)."""

from __future__ import annotations

import pytest
from redis.asyncio import Redis

from shared import dispatch, keys
from shared.scripts import LUA_DIR, Scripts, render

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
    scripts = Scripts(r, queued_check_ms=777, stream_maxlen=55, retention_s=99)
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
        "55", "99", "777", keys.BATCH_DELIVERY,
    ]  # fmt: skip
