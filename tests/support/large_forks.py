"""The set-up of the tests that fork a large run (figure 9's fork attack forks one of 0.9 MB): the
API in the test's process with a client once it is ready, and the large run submitted and ended
(by a worker the test runs beside it: tests.integration.helpers.running_worker)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx

from shared.settings import Settings
from tests.integration.api_support import A, api

__all__ = ["MESSAGES", "MESSAGE_CHARS", "ended", "large_messages", "large_run", "ready_client"]

MESSAGES, MESSAGE_CHARS = 9, 100_000  # figure 9's forked run: a 0.9 MB transcript


@asynccontextmanager
async def ready_client(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    """A client of the API served in this process with ``settings``, once it answers ``/readyz``."""
    async with api(settings) as url, httpx.AsyncClient(base_url=url, timeout=30) as c:
        for _ in range(200):
            if (await c.get("/readyz")).status_code == 200:
                break
            await asyncio.sleep(0.02)
        yield c


async def ended(c: httpx.AsyncClient, run_id: str, within: float = 40.0) -> dict[str, Any]:
    """Tenant A's run ``run_id`` once it has ended (``/wait`` until then): its view."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        view: dict[str, Any] = (
            await c.get(f"/v1/runs/{run_id}/wait", params={"timeout": 5}, headers=A)
        ).json()
        if view["status"] in ("completed", "failed", "aborted"):
            return view
    raise AssertionError(f"run {run_id} did not end")


def large_messages() -> list[dict[str, str]]:
    """The large run's input: MESSAGES user messages of MESSAGE_CHARS characters."""
    return [{"role": "user", "content": f"{i}" * MESSAGE_CHARS} for i in range(MESSAGES)]


async def large_run(c: httpx.AsyncClient) -> dict[str, Any]:
    """Tenant A's large run (one scripted step), submitted and ended completed: its view. A worker
    must be running."""
    run = {
        "agent": "scripted",
        "inputMessages": large_messages(),
        "runtimeHints": {"script": [{"text": "done"}]},
    }
    r = await c.post("/v1/runs", json=run, headers=A)
    assert r.status_code == 202, r.text
    view = await ended(c, r.json()["runId"])
    assert view["status"] == "completed", view
    return view
