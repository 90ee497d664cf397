"""Retry and fork on a real Redis Cluster (three masters, 16 partitions): the original is read on
its slot and the new run written on its own, so no script spans two slots; a batch's retries take
their places wherever they live."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import httpx
import pytest

from tests.integration.api_support import A, api, run_body
from tests.integration.api_support import settings as api_settings
from tests.integration.helpers import running_worker
from tests.support.redis_cluster import LocalRedisCluster
from tests.support.waits import until

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(120),
    pytest.mark.skipif(
        shutil.which("redis-cli") is None or shutil.which("redis-server") is None,
        reason="redis-server and redis-cli are needed to create a cluster",
    ),
]

FAILS_ONCE = [
    {"toolCalls": [{"name": "echo", "arguments": {"text": "kept"}}]},
    {"error": {"status": 400, "message": "no"}},
    {"text": "second time lucky"},
]


@pytest.fixture
def cluster() -> Iterator[LocalRedisCluster]:
    with LocalRedisCluster(masters=3, replicas_per_master=0) as c:
        yield c


async def ended(http: httpx.AsyncClient, run_id: str) -> dict[str, object]:
    view: dict[str, object] = {}

    async def done() -> bool:
        nonlocal view
        view = (await http.get(f"/v1/runs/{run_id}/wait", params={"timeout": 5})).json()
        return view["status"] in ("completed", "failed", "aborted")

    await until(f"run {run_id} ends", done, 40)
    return view


async def test_batch_retry_and_fork_across_slots(cluster: LocalRedisCluster) -> None:
    s = api_settings(cluster.url, redis_cluster=True)
    async with (
        api(s) as url,
        running_worker(cluster.url, redis_cluster=True),
        httpx.AsyncClient(base_url=url, headers=A, timeout=30) as http,
    ):
        r = await http.post(
            "/v1/runs/batch", json={"batchId": "cl-retry", "runs": [run_body(FAILS_ONCE)] * 6}
        )
        ids = [i["runId"] for i in r.json()["results"]]
        assert {(await ended(http, i))["status"] for i in ids} == {"failed"}
        answer = (await http.post("/v1/batches/cl-retry/retry")).json()
        retries = {i["runId"]: i["retryRunId"] for i in answer["results"]}
        assert set(retries) == set(ids) and all(retries.values()), answer
        views = {r: await ended(http, r) for r in retries.values()}
        assert {v["status"] for v in views.values()} == {"completed"}
        tags = {i: (await http.get(f"/v1/runs/{i}")).json()["streamKey"].split("}")[0] for i in ids}
        moved = [o for o, r in retries.items() if str(views[r]["streamKey"]).split("}")[0] != tags[o]]
        assert moved  # retries living in another slot than the run they replace
        batch = (await http.get("/v1/batches/cl-retry")).json()
        assert (batch["total"], batch["counts"]["completed"], batch["counts"]["failed"]) == (6, 6, 0)
        lines = (await http.get("/v1/batches/cl-retry/results")).text.splitlines()
        assert len(lines) == 6 and all('"completed"' in line for line in lines)

        # A fork at the last event of a failed run (in its slot) lives in its own slot; the echo
        # recorded before is reused, not executed again.
        original = ids[0]
        last = (await http.get(f"/v1/runs/{original}")).json()["lastSeq"]
        fork = (await http.post(f"/v1/runs/{original}/fork", json={"atSeq": last})).json()
        view = await ended(http, fork["runId"])
        assert (view["status"], view["forkOf"], view["atSeq"]) == ("completed", original, last)
        async with http.stream("GET", f"/v1/runs/{fork['runId']}/events") as sse:
            kinds = [line async for line in sse.aiter_lines() if line.startswith("event:")]
        assert kinds and "event: tool_call" not in kinds
