"""A fault-injecting HTTP proxy for model endpoints: it counts every request, answers the first
``failures`` of them with ``status`` (529 by default: Anthropic's "overloaded"; 503 is OpenAI's)
and passes the others on to ``upstream``, its answer streamed back as it comes."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.support.redis_server import free_port

__all__ = ["FaultProxy"]


class FaultProxy:
    def __init__(self, upstream: str, *, failures: int = 1_000_000, status: int = 529) -> None:
        self.upstream = upstream.rstrip("/")
        self.failures = failures
        self.status = status
        self.requests = 0  # every request that reached the proxy
        self.faulted = 0  # those answered with ``status``
        self.port = free_port()
        app = Starlette(routes=[Route("/v1/{path:path}", self.forward, methods=["POST"])])
        self.server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="error", lifespan="off")
        )
        self.task: asyncio.Task[None] | None = None
        self.http = httpx.AsyncClient(timeout=30.0)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def __aenter__(self) -> FaultProxy:
        self.task = asyncio.create_task(self.server.serve())
        while not self.server.started:
            await asyncio.sleep(0.01)
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.server.should_exit = True
        if self.task:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.task, 5)
        await self.http.aclose()

    async def forward(self, request: Request) -> Response:
        self.requests += 1
        body = await request.body()
        if self.faulted < self.failures:
            self.faulted += 1
            error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
            return JSONResponse(error, status_code=self.status)
        up = self.http.build_request(
            "POST", f"{self.upstream}/{request.path_params['path']}", content=body,
            headers={"content-type": "application/json"},
        )  # fmt: skip
        resp = await self.http.send(up, stream=True)

        async def relay() -> AsyncIterator[bytes]:
            try:
                async for chunk in resp.aiter_raw():
                    yield chunk
            finally:
                await resp.aclose()

        media = resp.headers.get("content-type", "application/json")
        return StreamingResponse(relay(), status_code=resp.status_code, media_type=media)
