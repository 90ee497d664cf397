"""/metrics on its own port (AGENTMILL_API_METRICS_PORT): a second listener in the API process,
started and stopped by the app's lifespan, so Prometheus can scrape a port the public Service does
not expose (the API port then answers 404 on /metrics). It serves the same scrape as the API port
would (producer/api/routes_ops.py, metrics_response) with the same header deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from agentmill_client.errors import ApiError
from producer.api.errors import error_response
from producer.api.routes_ops import metrics_response
from producer.api.serve import server_config
from producer.api.state import Api

__all__ = ["MetricsListener"]


class _Listener(uvicorn.Server):
    """Leaves the process's signals to the API's own server; the lifespan stops this one."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class MetricsListener:
    def __init__(self, api: Api, host: str, port: int) -> None:
        async def scrape(request: Request) -> Response:
            try:
                return await metrics_response(api, request.headers.get("authorization"))
            except ApiError as exc:
                return error_response(exc.status, exc.code, exc.message, headers=exc.headers)

        app = Starlette(routes=[Route("/metrics", scrape)])
        config = server_config(app, api.settings, host=host, port=port, lifespan="off", log_level="warning")
        self.server = _Listener(config)
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> int:
        """Listens; the port it listens on."""
        self.task = asyncio.create_task(self.server.serve())
        while not self.server.started:
            if self.task.done():
                await self.task  # it could not listen: raise why
                raise RuntimeError("the metrics listener stopped before listening")
            await asyncio.sleep(0.01)
        return int(self.server.servers[0].sockets[0].getsockname()[1])

    async def stop(self) -> None:
        self.server.should_exit = True
        if self.task is not None:
            await self.task
