"""Sub-agents on a real Redis Cluster (three masters, 16 partitions): a parent's children live on
another master than the parent, so a child's ending reaches its parent only through the handoff
(shared/children.py). Two single-slot worker processes, one SIGKILLed while the children run; then an
abort of a parent whose children are on other masters."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from shared import keys
from tests.integration.api_support import A, api, key
from tests.integration.api_support import settings as api_settings
from tests.support.procs import WorkerProc
from tests.support.redis_cluster import LocalRedisCluster
from tests.support.waits import until
from worker.core.preamble import unframe
from worker.machine import child_run_id

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(180),
    pytest.mark.skipif(
        shutil.which("redis-cli") is None or shutil.which("redis-server") is None,
        reason="redis-server and redis-cli are needed to create a cluster",
    ),
]

LAYOUT = keys.Layout(16)
FAST = {"AGENTMILL_LEASE_MS": "2000", "AGENTMILL_HEARTBEAT_MS": "300", "AGENTMILL_RECONCILE_MS": "300"}


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalRedisCluster]:
    with LocalRedisCluster(masters=3, replicas_per_master=0) as c:
        yield c


def profiles(tmp_path: Path) -> str:
    scripted = {"kind": "scripted", "mode": "script"}

    def helper(name: str, sleep_ms: int) -> dict[str, Any]:
        return {"name": name, "tools": ["sleep"], "provider": {**scripted, "script": [
            {"toolCalls": [{"name": "sleep", "arguments": {"ms": sleep_ms}}]}, {"echoContext": True}]}}  # fmt: skip

    boss = {"name": "boss", "provider": scripted, "agentTools": [{"agent": "helper", "name": "ask_helper"},
                                                                  {"agent": "slow", "name": "ask_slow"}]}  # fmt: skip
    path = tmp_path / "profiles.json"
    path.write_bytes(orjson.dumps({"profiles": [boss, helper("helper", 2500), helper("slow", 60_000)]}))
    return str(path)


def parent_apart(cluster: LocalRedisCluster, prefix: str, calls: int) -> str:
    """A parent run id (tenant-a's) whose children all live on other masters than itself."""
    for i in range(1000):
        rid = f"{prefix}-{i}"
        pkey = key(rid)
        home = cluster.master_for_slot(LAYOUT.home(pkey).slot)
        kids = [
            cluster.master_for_slot(LAYOUT.home(child_run_id(pkey, f"c1.{n}")).slot) for n in range(calls)
        ]
        if home not in kids:
            return rid
    raise AssertionError("no parent id found whose children live apart")


def boss_run(
    rid: str, tasks: list[str], then: list[dict[str, Any]], tool: str = "ask_helper"
) -> dict[str, Any]:
    call = {"toolCalls": [{"name": tool, "arguments": {"task": t}} for t in tasks]}
    return {"agent": "boss", "runId": rid, "inputMessages": [{"role": "user", "content": "go"}],
            "runtimeHints": {"script": [call, *then]}}  # fmt: skip


async def view(http: httpx.AsyncClient, rid: str) -> dict[str, Any]:
    r = await http.get(f"/v1/runs/{rid}")
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    return out


async def test_children_on_other_masters_answer_their_parent_through_a_sigkill(
    cluster: LocalRedisCluster, tmp_path: Path
) -> None:
    path = profiles(tmp_path)
    env = {"AGENTMILL_PROFILES": path, "AGENTMILL_REDIS_CLUSTER": "true", "AGENTMILL_MAX_JOBS": "1", **FAST}
    rid = parent_apart(cluster, "cl-sub", 3)
    procs = [WorkerProc(cluster.url, env=env, log=tmp_path / f"w{i}.log").start() for i in range(2)]
    spare: WorkerProc | None = None
    s = api_settings(cluster.url, redis_cluster=True, profiles=path)
    try:
        async with api(s) as url, httpx.AsyncClient(base_url=url, headers=A, timeout=15) as http:
            r = await http.post("/v1/runs", json=boss_run(rid, ["a", "b", "c"], [{"echoContext": True}]))
            assert r.status_code == 202, r.text

            async def two_running() -> Any:
                kids = (await view(http, rid)).get("children") or []
                return len([k for k in kids if k["status"] == "running"]) == 2

            await until("two children running on the two workers", two_running, within=60)
            procs[0].kill()  # a worker in the middle of a child's sleep
            spare = WorkerProc(cluster.url, env=env, log=tmp_path / "spare.log").start()

            async def ended() -> Any:
                v = await view(http, rid)
                return v if v["status"] in ("completed", "failed", "aborted") else None

            done = await until("the parent to end", ended, within=90)
            assert done["status"] == "completed", done
            seen = orjson.loads(done["result"]["finalAssistantMessage"]["content"])
            tools = [
                (m["toolCallId"], unframe(m["content"])) for m in seen["messages"] if m["role"] == "tool"
            ]
            assert [i for i, _ in tools] == ["c1.0", "c1.1", "c1.2"]  # one result per child
            for (_, content), task in zip(tools, ["a", "b", "c"], strict=True):
                assert [m["content"] for m in orjson.loads(content)["messages"] if m["role"] == "user"] == [
                    task
                ]
            kids = (await view(http, rid))["children"]
            assert {k["status"] for k in kids} == {"completed"} and len(kids) == 3
            pkey = key(rid)
            for k in kids:  # each child lives on another master than its parent
                assert cluster.master_for_slot(LAYOUT.home(k["runId"]).slot) != cluster.master_for_slot(
                    LAYOUT.home(pkey).slot
                )

            # An abort of a parked parent reaches its children on the other masters.
            other = parent_apart(cluster, "cl-sub-abort", 2)
            r = await http.post("/v1/runs", json=boss_run(other, ["x", "y"], [], tool="ask_slow"))
            assert r.status_code == 202, r.text

            async def parked() -> Any:
                return (await view(http, other))["status"] == "awaiting_children"

            await until("the second parent to park", parked, within=60)
            r = await http.post(f"/v1/runs/{other}/abort")
            assert r.status_code == 200, r.text

            async def all_aborted() -> Any:
                kids = (await view(http, other)).get("children") or []
                return len(kids) == 2 and all(k["status"] == "aborted" for k in kids)

            await until("every child aborted", all_aborted, within=30)
    finally:
        for w in procs:
            w.stop()
        if spare is not None:
            spare.stop()
