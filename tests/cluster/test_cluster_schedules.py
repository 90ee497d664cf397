"""Schedules on a real Redis Cluster (three masters, 16 partitions): each schedule's keys live in its
home partition's slot, the firers (the API's and a worker's) claim from every partition's due set
across the masters, and every schedule fires its runs there, one per firing."""

from __future__ import annotations

import asyncio
import shutil

import httpx
import pytest

from producer.scope import Scope
from shared import keys
from shared.settings import Settings
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

LAYOUT = keys.Layout(16)
SECRET = "cluster-id-secret"  # a named tenant's schedules fire only where the ID secret is set


async def test_schedules_fire_on_every_master_of_a_cluster() -> None:
    ids = [f"cl-sched-{i}" for i in range(8)]
    homes = [LAYOUT.home(Scope.of(Settings(id_secret=SECRET), "tenant-a").key(sid)) for sid in ids]
    with LocalRedisCluster(masters=3, replicas_per_master=0) as cluster:
        assert len({cluster.master_for_slot(h.slot) for h in homes}) > 1, "the schedules' homes on one master"
        s = api_settings(cluster.url, redis_cluster=True, redis_wait_replicas=0, id_secret=SECRET)
        async with (
            api(s) as url,
            running_worker(cluster.url, redis_cluster=True, redis_wait_replicas=0, id_secret=SECRET),
            httpx.AsyncClient(base_url=url, headers=A, timeout=15) as http,
        ):
            for sid in ids:
                body = {"scheduleId": sid, "cron": "* * * * * *", "input": run_body(), "overlap": "enqueue"}
                r = await http.post("/v1/schedules", json=body)
                assert r.status_code == 201, r.text

            async def each_fired_twice() -> bool:
                listed = (await http.get("/v1/schedules")).json()["schedules"]
                return len(listed) == len(ids) and all(v["fired"] >= 2 for v in listed)

            await until("every schedule fired twice", each_fired_twice, 20)
            for sid in ids:
                assert (await http.post(f"/v1/schedules/{sid}/pause")).status_code == 200
            await asyncio.sleep(1)
            listed = (await http.get("/v1/schedules")).json()["schedules"]
            assert sorted(v["scheduleId"] for v in listed) == ids
            for view in listed:
                assert view["fired"] >= 2, view
                run = await http.get(f"/v1/runs/{view['lastRunId']}")
                assert run.status_code == 200 and run.json()["runId"].startswith(view["scheduleId"] + ":")
