"""Processes that meet Redis down: the API started before Redis serves /healthz and a 503 /readyz
with the reason, then serves normally once Redis answers; a worker whose Redis goes away for a
moment is not ready meanwhile. Each logs the outage once as it begins and once as it ends."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import orjson
import pytest

from tests.support.procs import WorkerProc, wait_until
from tests.support.redis_server import RedisServer, free_port

UNREACHABLE = "redis unreachable at redis://127.0.0.1:"
REACHABLE = "redis reachable again after "


def _get(url: str) -> httpx.Response | None:
    try:
        return httpx.get(url, timeout=2.0)
    except httpx.HTTPError:
        return None


def _status(url: str) -> int | None:
    r = _get(url)
    return None if r is None else r.status_code


def _lines(log: Path, text: str) -> list[str]:
    return [ln for ln in log.read_text(errors="replace").splitlines() if text in ln]


def test_the_api_started_before_redis_waits_for_it_and_logs_each_outage_once(tmp_path: Path) -> None:
    server = RedisServer()  # its port chosen, nothing listening there yet
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log = tmp_path / "api.log"
    # A profile whose model key is not in the API's environment: the API never calls the model,
    # so it starts (a worker would refuse it).
    profiles = tmp_path / "profiles.json"
    profiles.write_bytes(orjson.dumps({"profiles": [{"name": "gpt", "provider": {
        "kind": "openai", "baseUrl": "http://127.0.0.1:1/v1", "model": "m", "apiKeyEnv": "AGENTMILL_TEST_NO_KEY"}}]}))  # fmt: skip
    env = {
        "AGENTMILL_API_PORT": str(port),
        "AGENTMILL_AUTH_DISABLED": "true",
        "AGENTMILL_PROFILES": str(profiles),
    }
    api = WorkerProc(server.url, argv=["-m", "app.cli", "api"], env=env, log=log).start()
    try:
        assert wait_until(lambda: _status(f"{base}/healthz") == 200, 60), log.read_text()
        ready = _get(f"{base}/readyz")
        assert ready is not None and ready.status_code == 503
        error = ready.json()["error"]
        assert error["code"] == "redis_unavailable" and "waiting for Redis" in error["message"], error
        assert "Connection refused" in error["message"] or "ConnectionError" in error["message"], error
        assert _status(f"{base}/v1/runs/run_x") == 503
        root = httpx.get(f"{base}/", timeout=2.0)
        assert root.status_code == 307 and root.headers["location"] == "/ui/"
        assert _lines(log, f"agentmill api listening on http://127.0.0.1:{port}"), log.read_text()
        time.sleep(1.5)  # a few probes fail meanwhile: still one line

        server.start()
        t0 = time.monotonic()
        assert wait_until(lambda: _status(f"{base}/readyz") == 200, 10), log.read_text()
        assert time.monotonic() - t0 < 8
        r = httpx.post(f"{base}/v1/runs", json={"inputMessages": [{"role": "user", "content": "2 + 2"}]})
        assert r.status_code == 202, r.text
        assert httpx.get(f"{base}/v1/runs/{r.json()['runId']}").json()["status"] == "queued"
        assert len(_lines(log, UNREACHABLE)) == 1 and len(_lines(log, REACHABLE)) == 1, log.read_text()

        # An outage while it serves: logged once more as it begins and ends, its loops (webhooks,
        # schedules) quiet meanwhile.
        before = len(log.read_text(errors="replace").splitlines())
        server.stop()
        assert wait_until(lambda: _status(f"{base}/readyz") == 503, 10), log.read_text()
        time.sleep(2.0)
        server.start()
        assert wait_until(lambda: _status(f"{base}/readyz") == 200, 10), log.read_text()
        assert wait_until(lambda: len(_lines(log, REACHABLE)) == 2, 5), log.read_text()
        during = log.read_text(errors="replace").splitlines()[before:]
        assert [ln for ln in during if UNREACHABLE in ln or REACHABLE in ln] == during, during
    finally:
        api.stop(timeout=20)
        server.close()
    text = log.read_text(errors="replace")
    assert len(_lines(log, UNREACHABLE)) == 2 and len(_lines(log, REACHABLE)) == 2, text
    assert "Traceback" not in text, text


@pytest.mark.timeout(90)
def test_a_worker_logs_a_short_outage_once_and_is_not_ready_during_it(tmp_path: Path) -> None:
    server = RedisServer().start()
    port = free_port()
    log = tmp_path / "worker.log"
    env = {"AGENTMILL_WORKER_METRICS_PORT": str(port), "AGENTMILL_WORKER_METRICS_HOST": "127.0.0.1"}
    worker = WorkerProc(server.url, env=env, log=log).start()
    readyz, healthz = f"http://127.0.0.1:{port}/readyz", f"http://127.0.0.1:{port}/healthz"
    try:
        assert wait_until(lambda: _status(readyz) == 200, 60), log.read_text()
        server.stop()
        assert wait_until(lambda: _status(readyz) == 503, 10), log.read_text()
        assert _status(healthz) == 200  # the liveness probe: it waits the outage out, alive
        time.sleep(2.0)  # probes fail a second apart meanwhile
        server.start()
        assert wait_until(lambda: _status(readyz) == 200, 10), log.read_text()
    finally:
        worker.stop(timeout=20)
        server.close()
    text = log.read_text(errors="replace")
    assert len(_lines(log, UNREACHABLE)) == 1, text
    (back,) = _lines(log, REACHABLE)
    assert 2.0 <= float(back.split(REACHABLE)[1].split(" s")[0]) < 15, back
    assert "Traceback" not in text, text
