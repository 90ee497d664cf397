"""The API as the integration tests run it: `agentmill api`'s server config on a free port, two
tenants' tokens, run bodies for the scripted profile, and waits on a run's or a batch's view."""

from __future__ import annotations

import asyncio
import functools
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from app.api import create_app
from producer.api.serve import api_server
from producer.scope import Scope
from shared.settings import Settings
from tests.support.redis_server import free_port

TOKENS = "tok-a=tenant-a,tok-b=tenant-b"
A = {"Authorization": "Bearer tok-a"}
B = {"Authorization": "Bearer tok-b"}


@asynccontextmanager
async def api(settings: Settings) -> AsyncIterator[str]:
    """The API in this process, served as `agentmill api` serves it; yields its base URL."""
    port = free_port()
    server = api_server(create_app(settings), settings, host="127.0.0.1", port=port, log_level="error")
    task = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task


def settings(redis_url: str, **kw: Any) -> Settings:
    return Settings(redis_url=redis_url, api_tokens=TOKENS, **kw)


def key(run_id: str, tenant: str = "tenant-a") -> str:
    """The id the keys of a named tenant's run (or session) use (producer.submission.Scope)."""
    return _scope(tenant, os.environ.get("AGENTMILL_ID_SECRET")).key(run_id)


@functools.lru_cache(maxsize=32)
def _scope(tenant: str, _id_secret: str | None) -> Scope:
    """The tenant's scope under the environment's settings, built once per secret: Settings() takes
    about 3 ms of CPU, and built per id, the ids of a 200-run batch held the test's loop (with the API
    and the worker in it) for 1-2 s under load."""
    return Scope.of(Settings(), tenant)


def body(**kw: Any) -> dict[str, Any]:
    """A run of the scripted profile with no script (it answers with its default turn)."""
    return {"agent": "scripted", "inputMessages": [{"role": "user", "content": "go"}], **kw}


def run_body(script: list[dict[str, Any]] | None = None, **kw: Any) -> dict[str, Any]:
    """A run of the scripted profile following ``script`` (one greeting by default)."""
    return body(runtimeHints={"script": script or [{"text": "hello"}]}, **kw)


async def until_view(
    c: httpx.AsyncClient, path: str, pred: Callable[[Any], Any], within: float, every: float
) -> dict[str, Any]:
    """GET ``path`` every ``every`` s until ``pred`` holds of its JSON or ``within`` s passed: the last view."""
    deadline = time.monotonic() + within
    while True:
        view = (await c.get(path)).json()
        if pred(view) or time.monotonic() > deadline:
            return dict(view)
        await asyncio.sleep(every)


async def until_batch(c: httpx.AsyncClient, batch_id: str, pred: Any, within: float = 20.0) -> dict[str, Any]:
    """The batch's view once ``pred`` holds of it, or the last one after ``within`` s (the caller checks)."""
    return await until_view(c, f"/v1/batches/{batch_id}", pred, within, 0.1)


async def until_run(c: httpx.AsyncClient, run_id: str, pred: Any, within: float = 20.0) -> dict[str, Any]:
    """The run's view once ``pred`` holds of it; fails after ``within`` s."""
    view = await until_view(c, f"/v1/runs/{run_id}", pred, within, 0.02)
    assert pred(view), view
    return view


class HookServer:
    """A webhook receiver on a free loopback port: ``hook`` answers POSTs to ``path``."""

    def __init__(self, hook: Callable[[Request], Awaitable[Response]], path: str = "/hook") -> None:
        self.port = free_port()
        app = Starlette(routes=[Route(path, hook, methods=["POST"])])
        self.server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="error", lifespan="off")
        )
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self.task = asyncio.create_task(self.server.serve())
        while not self.server.started:
            await asyncio.sleep(0.01)

    async def stop(self) -> None:
        self.server.should_exit = True
        if self.task is not None:
            await self.task
