"""A Starlette app served by uvicorn on a free loopback port for the length of an ``async with``: the
one server the test doubles of HTTP peers (fake_openai, llama_replay, messages_replay) run on."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, Self

import uvicorn
from starlette.applications import Starlette
from starlette.routing import Route

from tests.support.ports import free_port

__all__ = ["LocalApp"]


class LocalApp:
    """Serves ``routes`` at ``http://127.0.0.1:<port>`` while entered."""

    def __init__(self, routes: list[Route]) -> None:
        self.port = free_port()
        self.server = uvicorn.Server(
            uvicorn.Config(
                Starlette(routes=routes), host="127.0.0.1", port=self.port, log_level="error", lifespan="off"
            )
        )
        self.task: asyncio.Task[None] | None = None

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def __aenter__(self) -> Self:
        self.task = asyncio.create_task(self.server.serve())
        while not self.server.started:
            await asyncio.sleep(0.01)
        return self

    async def __aexit__(self, *exc: Any) -> None:
        self.server.should_exit = True
        if self.task is not None:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(self.task, 10)
