"""`agentmill api` and a worker, each in its own process on one Redis, for the fuzzing tests: yields
the API's base URL once it answers /readyz (the worker ends the runs the fuzzers create)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from tests.support.procs import WorkerProc, wait_until
from tests.support.redis_server import RedisServer, free_port

__all__ = ["live_api", "ready"]


def ready(url: str) -> bool:
    try:
        return httpx.get(f"{url}/readyz", timeout=1.0).status_code == 200
    except httpx.HTTPError:
        return False


@contextmanager
def live_api(logs: Path, **env: str) -> Iterator[str]:
    """Auth off (every request is the default tenant's) unless ``env`` says otherwise."""
    with RedisServer() as redis:
        port = free_port()
        api = WorkerProc(
            redis.url,
            argv=["-m", "app.cli", "api"],
            env={"AGENTMILL_API_PORT": str(port), "AGENTMILL_AUTH_DISABLED": "true", **env},
            log=logs / "api.log",
        ).start()
        # The fuzzers start runs that sleep for a minute: stopped, the worker hands them back at once
        # rather than waiting out the default drain for calls in flight (20 s; 10 s to SIGKILL here).
        worker = WorkerProc(
            redis.url, env={"AGENTMILL_DRAIN_TIMEOUT_S": "0.5"}, log=logs / "worker.log"
        ).start()
        url = f"http://127.0.0.1:{port}"
        try:
            if not wait_until(lambda: ready(url) or not api.alive, 30.0) or not api.alive:
                raise RuntimeError(f"the API did not start: {(logs / 'api.log').read_text()[-2000:]}")
            yield url
        finally:
            worker.stop(timeout=10)
            api.stop(timeout=10)
