"""Processes that make a named tenant's runs hold AGENTMILL_ID_SECRET: `agentmill api` and
`agentmill worker` refuse to start without it when their settings name a tenant (one line, exit 2),
and a firer without it leaves a named tenant's schedule to one that has it instead of storing runs
no other process can read.

The processes start as ``python -m …`` through the fork server (tests/support/forkserver.py): the
module run as ``__main__`` with the test's environment in a child of a process that imported it
(the checks run at start, not at import), without about 2 s of CPU for a fresh interpreter's imports."""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from redis.asyncio import Redis

from agentmill_client.schedules import ScheduleInput
from producer.schedules.firer import Firer
from producer.schedules.store import ScheduleStore
from tests.integration.api_support import body
from tests.integration.helpers import make_due, producer_for
from tests.support import forkserver

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SECRET = "test-id-secret"
ENTRY_POINTS = {
    "api": ["-m", "app.cli", "api"],
    "agentmill worker": ["-m", "app.cli", "worker"],
    "python -m app.worker": ["-m", "app.worker"],
}
NAMED = {
    "tokens": {"AGENTMILL_API_TOKENS": "tok-a=tenant-a"},
    "quotas": {"AGENTMILL_TENANT_QUOTAS": '{"tenant-a": {"maxRunning": 5}}'},
}


def started(argv: list[str], env: dict[str, str], within: float = 30.0) -> subprocess.CompletedProcess[str]:
    """``argv`` with ``env`` over an environment holding no AGENTMILL_* setting and a Redis that is
    not there (port 1): a process that passes its start-up checks is still waiting, and is stopped."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("AGENTMILL_") and k != "REDIS_URL"}
    full = {**clean, "REDIS_URL": "redis://127.0.0.1:1/0", "AGENTMILL_WORKER_METRICS_PORT": "-1",
            "AGENTMILL_API_PORT": "0", **env}  # fmt: skip
    try:
        return forkserver.run(argv, cwd=ROOT, env=full, timeout=within)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(argv, -1, "", f"still running after {within} s")


@pytest.mark.parametrize("named", NAMED)
@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_a_process_naming_tenants_without_the_id_secret_exits_with_one_line(entry: str, named: str) -> None:
    res = started(ENTRY_POINTS[entry], NAMED[named])
    assert res.returncode == 2, (res.returncode, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
    assert "AGENTMILL_ID_SECRET" in lines[0] and next(iter(NAMED[named])) in lines[0], lines[0]
    assert "tenant-a" in lines[0]


def waiting_for_redis(argv: list[str], env: dict[str, str], within: float = 60.0) -> tuple[bool, str]:
    """Whether ``argv`` (as in ``started``) got past its start-up checks to waiting for Redis (it logs
    the outage) within ``within`` s, and what it wrote to stderr until then; stopped either way."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("AGENTMILL_") and k != "REDIS_URL"}
    full = {**clean, "REDIS_URL": "redis://127.0.0.1:1/0", "AGENTMILL_WORKER_METRICS_PORT": "-1", **env}
    err_r, err_w = os.pipe()
    try:
        proc = forkserver.popen(argv, cwd=ROOT, env=full, stderr=err_w)
    finally:
        os.close(err_w)
    lines: list[str] = []
    timer = threading.Timer(within, proc.kill)
    timer.start()
    try:
        with open(err_r, encoding="utf-8", errors="replace") as stderr:
            for line in stderr:  # ends when the process ends (or is killed at ``within``)
                lines.append(line)
                if "redis unreachable" in line:
                    return True, "".join(lines)
        return False, "".join(lines)
    finally:
        timer.cancel()
        proc.kill()
        proc.wait()


def test_with_the_secret_or_a_single_tenant_the_process_starts() -> None:
    """The same settings with the secret, and a single-tenant API (auth off, or tokens of the
    default tenant only): past the check, waiting for Redis (stopped once it says so). The three
    start side by side."""
    envs = (
        {**NAMED["tokens"], "AGENTMILL_ID_SECRET": SECRET},
        {"AGENTMILL_AUTH_DISABLED": "true", **NAMED["tokens"]},
        {"AGENTMILL_API_TOKENS": "tok-d=default,tok-e"},
    )
    with ThreadPoolExecutor(len(envs)) as pool:
        results = list(
            pool.map(lambda env: waiting_for_redis(ENTRY_POINTS["python -m app.worker"], env), envs)
        )
    for env, (waiting, stderr) in zip(envs, results, strict=True):
        assert waiting, (env, stderr)
        assert "AGENTMILL_ID_SECRET" not in stderr, stderr


async def test_a_firer_without_the_secret_leaves_a_named_tenants_schedule_to_one_that_has_it(
    redis: Redis, redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    fast = {"schedule_lease_ms": 100}
    api = producer_for(redis, redis_url, id_secret=SECRET, **fast)  # the API that made the schedule
    store = ScheduleStore(api)
    await store.create(
        ScheduleInput(scheduleId="nightly", cron="* * * * * *", input=body()), "tenant-a", "nightly"
    )
    key, home = store.where("nightly", "tenant-a")
    await make_due(redis, home, key, "tenant-a", 0)  # due now

    keyless = Firer(producer_for(redis, redis_url, **fast))  # a worker without the secret
    with caplog.at_level(logging.ERROR, logger="agentmill.schedules"):
        for _ in range(3):  # claimed each time its claim expired, fired never, said once
            assert await keyless.fire_due() == 0
            await asyncio.sleep(0.15)
    said = [r.getMessage() for r in caplog.records if r.name == "agentmill.schedules"]
    assert len(said) == 1 and "AGENTMILL_ID_SECRET" in said[0] and "nightly" in said[0], said
    assert [k async for k in redis.scan_iter(home.run("*"))] == []  # no run stored under the dev key
    view = await store.get("nightly", "tenant-a")
    assert view is not None and view.fired == 0 and view.last_run_id is None

    assert await Firer(api).fire_due() == 1  # a firer with the secret makes the firing
    view = await store.get("nightly", "tenant-a")
    assert view is not None and view.last_run_id is not None
    assert await api.get(view.last_run_id, tenant="tenant-a") is not None  # and it reads back
