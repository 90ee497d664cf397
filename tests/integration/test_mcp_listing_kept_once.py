"""An MCP server's tool listing is kept once, not in every run (worker/tools/mcp_listings.py): runs
of a profile whose server (tests/support/mcp_flood_server.py, the ``mcp`` package's own server) lists
200 tools store the same configuration bytes whether each schema is 100 bytes or 4 kB, and the
listing once; a run whose worker is SIGKILLed resumes on another with the tools it started with,
even when the server lists other schemas by then."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from redis.asyncio import Redis

from shared.fields import RunField
from tests.integration.helpers import producer_for, running_worker, stream, wait_all
from tests.support.mcp_flood_server import flood_server
from tests.support.mcp_profiles import call
from tests.support.mcp_server import McpServerProc
from tests.support.procs import WorkerProc, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

TOOLS = 200
FAST = {"AGENTMILL_LEASE_MS": "2000", "AGENTMILL_HEARTBEAT_MS": "300", "AGENTMILL_RECONCILE_MS": "300"}


def profiles(url: str, path: Path) -> str:
    doc = {"profiles": [{"name": "flood", "provider": {"kind": "scripted", "mode": "script"},
                         "mcpServers": [{"name": "srv", "url": url, "allowHosts": ["127.0.0.1"]}]}]}  # fmt: skip
    path.write_bytes(orjson.dumps(doc))
    return str(path)


def run(script: list[dict[str, Any]]) -> dict[str, Any]:
    return {"agent": "flood", "inputMessages": [{"role": "user", "content": "go"}],
            "runtimeHints": {"script": script}}  # fmt: skip


async def stored(redis: Redis) -> tuple[dict[str, int], list[bytes]]:
    """Each run hash's checkpoint and configuration bytes, and the MCP listing keys."""
    per_run: dict[str, int] = {}
    listings: list[bytes] = []
    async for k in redis.scan_iter(count=1000):
        if k.startswith(b"am:mcp:"):
            listings.append(k)
        elif await redis.type(k) == b"hash" and await redis.hexists(k, RunField.CKPT):
            got = await redis.hmget(k, [RunField.CKPT, RunField.CONFIG])
            per_run[k.decode()] = sum(len(v or b"") for v in got)
    return per_run, listings


async def runs_of_a_listing(
    redis: Redis, redis_url: str, tmp_path: Path, schema_bytes: int
) -> tuple[int, int]:
    """Three runs of the profile against a server of TOOLS tools of ``schema_bytes`` each: the largest
    bytes one run stores for its checkpoint and configuration, and how many listings are kept."""
    await redis.flushall()
    with flood_server(tmp_path, tools=TOOLS, schema_bytes=schema_bytes) as srv:
        prof = profiles(srv.url, tmp_path / f"profiles-{schema_bytes}.json")  # a file of its own: read anew
        p = producer_for(redis, redis_url, profiles=prof)
        async with running_worker(redis_url, profiles=prof):
            ids = [(await p.submit(run([{"toolCalls": [call("srv__blocks", n=1)]}, {"text": "done"}]))).run_id  # type: ignore[union-attr]
                   for _ in range(3)]  # fmt: skip
            recs = await wait_all(p, ids, 60)
    assert all(r.status.value == "completed" for r in recs.values()), recs
    per_run, listings = await stored(redis)
    assert len(per_run) == 3, per_run
    return max(per_run.values()), len(listings)


async def test_a_runs_stored_configuration_does_not_grow_with_its_servers_listing(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    small, kept_small = await runs_of_a_listing(redis, redis_url, tmp_path, 100)
    large, kept_large = await runs_of_a_listing(redis, redis_url, tmp_path, 4_000)
    print(f"per run, checkpoint + config: {small} bytes (100 B schemas), {large} bytes (4 kB schemas)")
    assert kept_small == kept_large == 1  # the listing, once for the three runs
    assert abs(large - small) < 200, (small, large)  # the listing alone is 800 kB larger
    assert large < TOOLS * 100


async def test_a_run_resumed_on_another_worker_has_the_tools_it_started_with(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    """The first worker dies after the run's first tool call; by then the server lists other
    schemas. The rescuer resumes the run with the listing it started with (its hash pins it in
    Redis), so nothing says the listing changed."""
    with flood_server(tmp_path, tools=20, schema_bytes=100) as srv:
        prof = profiles(srv.url, tmp_path / "profiles.json")
        env = {**FAST, "AGENTMILL_PROFILES": prof}
        p = producer_for(redis, redis_url, profiles=prof)
        script = [{"toolCalls": [call("srv__blocks", n=1)]}, {"echoContext": True}]
        rid = (await p.submit(run(script))).run_id  # type: ignore[union-attr]
        doomed = WorkerProc(redis_url, env={**env, "AGENTMILL_FAILPOINTS": "after_tool_effect:1"}).start()
        assert wait_until(lambda: not doomed.alive, 30), "the worker never reached after_tool_effect"
        srv.stop()
        # the same server, listing other schemas now
        other = McpServerProc(srv.port, tmp_path / "other.jsonl", module="tests.support.mcp_flood_server",
                              args=("20", "300", "100")).start()  # fmt: skip
        try:
            rescuer = WorkerProc(redis_url, env=env).start()
            try:
                rec = (await wait_all(p, [rid], 60))[rid]
            finally:
                rescuer.stop()
        finally:
            other.stop()
    assert rec.status.value == "completed", rec.result
    offered = orjson.loads(rec.result.final_assistant_message.content)["tools"]  # type: ignore[union-attr]
    assert set(offered) - {"recall_tool_call"} == {
        "srv__blocks",
        "srv__storm",
        *(f"srv__t{i}" for i in range(20)),
    }
    events = await stream(redis, rid)
    assert not [e for e in events if e.kind == "status" and e.payload.get("status") == "mcp_tools_relisted"]
    _, listings = await stored(redis)
    assert len(listings) == 1
