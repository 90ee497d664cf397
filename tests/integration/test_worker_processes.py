"""``agentmill worker --processes 2`` as a user runs it: both processes take runs, one SIGKILLed is
started again and its runs are resumed, SIGTERM drains both and the supervisor exits 0, and its one
/metrics counts the runs of both."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families
from redis.asyncio import Redis

from tests.integration.helpers import (
    assert_clean_stream,
    http_get,
    producer_for,
    script_run,
    stream,
    wait_all,
)
from tests.integration.test_recovery import FAST, owners, steps
from tests.support.ports import free_port
from tests.support.procs import WorkerProc
from tests.support.schema import K
from tests.support.waits import until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

ARGV = ["-m", "app.cli", "worker", "--processes", "2"]


def supervisor(redis_url: str, tmp_path: Path, **env: str) -> tuple[WorkerProc, str]:
    port = free_port()
    env = {**FAST, "AGENTMILL_WORKER_ID": "multi", "AGENTMILL_WORKER_METRICS_HOST": "127.0.0.1",
           "AGENTMILL_WORKER_METRICS_PORT": str(port), "AGENTMILL_MAX_JOBS": "4", **env}  # fmt: skip
    proc = WorkerProc(redis_url, env=env, log=tmp_path / "worker.log", argv=ARGV).start()
    return proc, f"http://127.0.0.1:{port}"


async def ready(base: str) -> dict[str, object]:
    """/readyz's answer once both processes are ready."""

    async def both() -> dict[str, object] | None:
        try:
            status, body = await asyncio.to_thread(http_get, f"{base}/readyz")
        except OSError:
            return None
        return orjson.loads(body) if status == 200 else None

    answer: dict[str, object] = await until("both processes ready", both, within=40, every=0.2)
    return answer


def pids(answer: dict[str, object]) -> list[int]:
    procs = answer["processes"]
    assert isinstance(procs, list)
    return [int(p["pid"]) for p in procs]


async def samples(base: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    status, body = await asyncio.to_thread(http_get, f"{base}/metrics")
    assert status == 200
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(body)  # the whole exposition parses
        for s in fam.samples
    }


async def test_both_processes_take_runs_and_one_metrics_counts_them_all(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    sup, base = supervisor(redis_url, tmp_path)
    try:
        await ready(base)
        p = producer_for(redis, redis_url)
        subs = await p.submit_many([script_run(steps(2, 200)) for _ in range(16)])
        ids = [s.run_id for s in subs]  # type: ignore[union-attr]
        seen: set[str] = set()

        async def both_own_runs() -> bool:
            seen.update(v for v in (await owners(redis, ids)).values() if v)
            return seen >= {"multi-0.1", "multi-1.1"}

        await until("runs owned by both processes", both_own_runs, within=30, every=0.05)
        recs = await wait_all(p, ids, 60)
        assert {r.status.value for r in recs.values()} == {"completed"}
        m = await samples(base)
    finally:
        rc = sup.stop(timeout=40)
    assert rc == 0, (tmp_path / "worker.log").read_text()
    assert m[("agentmill_runs_finished_total", (("status", "completed"),))] == 16  # summed
    assert m[("agentmill_runs_started_total", (("resumed", "false"),))] == 16
    # a gauge is per process: a sum of two build infos or start times would mean nothing
    assert {k[1] for k in m if k[0] == "agentmill_build_info"} == {
        (("process", "0"), ("version", "0.1.0")), (("process", "1"), ("version", "0.1.0"))
    }  # fmt: skip
    assert m[("agentmill_worker_processes", ())] == 2
    assert m[("agentmill_worker_process_restarts_total", ())] == 0


async def test_a_killed_process_is_started_again_and_sigterm_drains_both(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    sup, base = supervisor(redis_url, tmp_path, AGENTMILL_DRAIN_TIMEOUT_S="5")
    try:
        first = pids(await ready(base))
        p = producer_for(redis, redis_url)
        subs = await p.submit_many([script_run(steps(6, 300)) for _ in range(8)])
        ids = [s.run_id for s in subs]  # type: ignore[union-attr]

        async def mid_run_on_both() -> bool:
            held = set((await owners(redis, ids)).values())
            lengths = [await redis.xlen(K.events(r)) for r in ids]
            return held == {"multi-0.1", "multi-1.1"} and min(lengths) >= 4

        await until("every run under way, on both processes", mid_run_on_both, within=30, every=0.05)
        victims = [r for r, o in (await owners(redis, ids)).items() if o == "multi-0.1"]
        os.kill(first[0], signal.SIGKILL)

        async def restarted() -> list[int] | None:
            now = pids(await ready(base))
            return now if now[0] != first[0] else None

        again: list[int] = await until("process 0 started again", restarted, within=40)
        assert again[1] == first[1]  # the other one untouched
        recs = await wait_all(p, ids, 60)
        assert {r.status.value for r in recs.values()} == {"completed"}  # no run lost
        for r in victims:
            events = await stream(redis, r)
            assert_clean_stream(events)
            assert int(await redis.hget(K.run(r), "crashes") or 0) == 1  # resumed after the kill
        m = await samples(base)
        assert m[("agentmill_worker_process_restarts_total", ())] == 1

        # SIGTERM with runs in flight on both: each drains and hands its runs back; exit 0
        more = await p.submit_many([script_run(steps(20, 300)) for _ in range(8)])
        more_ids = [s.run_id for s in more]  # type: ignore[union-attr]

        async def on_both() -> bool:
            return {v for v in (await owners(redis, more_ids)).values() if v} == {"multi-0.2", "multi-1.1"}

        await until("the new runs on both processes", on_both, within=30, every=0.05)
        t0 = time.monotonic()
        sup.signal(signal.SIGTERM)
        rc = await asyncio.to_thread(sup.wait, 30)
    finally:
        sup.stop(timeout=40)
    log = (tmp_path / "worker.log").read_text()
    assert rc == 0, log
    assert time.monotonic() - t0 < 5 + 10
    assert f"worker process 0 (pid {first[0]}) was killed by SIGKILL; starting another" in log
    assert log.count("was killed by SIGKILL") == 1
    assert set((await owners(redis, more_ids)).values()) == {""}  # every run handed back
    for pid in (*again,):
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)  # no process left behind
