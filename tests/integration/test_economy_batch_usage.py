"""A batch mixing economy and standard runs, on real worker processes, the local batch server and
(for the archive's view) a real PostgreSQL: its usage's lanes add up to its totals, the economy
lane's share is what the economy calls recorded, and the archive's batch answers the same."""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

from producer.archived import ArchiveReads
from producer.listing import Catalog, batch_view
from shared.archive.store import ArchiveStore
from tests.integration.helpers import stream
from tests.support.batch_server import BatchServer, tool_rounds_backend
from tests.support.economy_workers import economy_producer, economy_run, finished_on, profiles
from tests.support.postgres_server import PostgresServer, binaries
from tests.support.procs import WorkerProc
from tests.support.schema import K
from tests.support.waits import until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(150)]

TOKENS = ("inputTokens", "outputTokens", "cacheReadTokens", "cacheWriteTokens")


def _sum(usages: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {k: sum(int(u.get(k) or 0) for u in usages) for k in TOKENS}
    out["costUsd"] = sum(float(u.get("costUsd") or 0.0) for u in usages)
    return out


def _close(lane: dict[str, Any], want: dict[str, Any]) -> None:
    assert {k: lane[k] for k in TOKENS} == {k: want[k] for k in TOKENS}
    assert lane["costUsd"] == pytest.approx(want["costUsd"], abs=1e-9)


async def test_a_batchs_usage_splits_by_lane_in_redis_and_in_the_archive(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    n = 12  # every third run in the standard lane
    items = [economy_run(i) if i % 3 else {**economy_run(i), "lane": "standard"} for i in range(n)]
    archived = binaries() is not None
    with PostgresServer() if archived else nullcontext(None) as pg:
        env = {"AGENTMILL_ARCHIVE_URL": pg.url, "AGENTMILL_WORKER_ARCHIVER": "false"} if pg else {}
        async with BatchServer(
            tool_rounds_backend("echo", rounds=1, arguments={"text": "x"}), delay_s=0.1
        ) as server:
            path = profiles(tmp_path, server.base_url)
            p = economy_producer(redis, redis_url, path, **({"archive_url": pg.url} if pg else {}))
            ids = [s.run_id for s in await p.submit_many(items, batch_id="mix")]
            recs = await finished_on(p, ids, redis_url, path, **env)
        assert {r.status.value for r in recs.values()} == {"completed"}  # type: ignore[attr-defined]

        # each model call's recorded usage, by the lane that answered it
        calls: dict[str, list[dict[str, Any]]] = {"economy": [], "standard": []}
        for rid in ids:
            for e in await stream(redis, rid):
                if e.kind == "usage":
                    u = e.payload["usage"]
                    calls["economy" if u.get("lane") == "economy" else "standard"].append(u)
        assert len(calls["economy"]) == 2 * len([i for i in range(n) if i % 3])  # 2 calls a run
        assert len(calls["standard"]) == 2 * len([i for i in range(n) if not i % 3])

        view = await Catalog(p).batch("default", "mix")
        assert view is not None and view["finished"]
        usage = view["usage"]
        lanes = usage["lanes"]
        _close(lanes["economy"], _sum(calls["economy"]))
        _close(lanes["standard"], _sum(calls["standard"]))
        for k in TOKENS:
            assert lanes["economy"][k] + lanes["standard"][k] == usage[k], k
        assert lanes["economy"]["costUsd"] + lanes["standard"]["costUsd"] == pytest.approx(usage["costUsd"])
        # the batch price: an economy call costs half what the same call costs in the standard lane
        assert lanes["economy"]["costUsd"] * 2 * len(calls["standard"]) == pytest.approx(
            lanes["standard"]["costUsd"] * len(calls["economy"])
        )
        # the run hash keeps its economy share (the archive's copy): an economy run's, not a standard one's
        eco = await redis.hgetall(K.run(ids[1]))
        std = await redis.hgetall(K.run(ids[0]))
        assert int(eco[b"economyInputTokens"]) > 0 and b"economyInputTokens" not in std

        if pg is None:
            pytest.skip("no PostgreSQL binaries (initdb, pg_ctl): the archive's view not checked")
        archiver = WorkerProc(redis_url, env={**env, "AGENTMILL_ARCHIVE_POLL_MS": "100"},
                              argv=["-m", "app.cli", "archiver"], log=tmp_path / "archiver.log").start()  # fmt: skip
        try:

            async def archived_all() -> bool:
                return int(await redis.zcard(K.archive)) == 0

            await until("every run archived", archived_all, within=30)
        finally:
            archiver.stop()
        reads = ArchiveReads(ArchiveStore(pg.url))
        try:
            h = await reads.batch("default", "mix")
        finally:
            await reads.aclose()
        assert h is not None
        assert batch_view(h)["usage"] == usage
