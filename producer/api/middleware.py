"""ASGI middleware of the API: the request body limit (413/408) and the request metrics."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import orjson
from starlette.exceptions import HTTPException as StarletteHTTPException

from producer.api.errors import error_response
from producer.api.metrics import METHODS

__all__ = ["BodyLimit", "Observe"]


class BodyLimit:
    """413 for bodies over the limit, by Content-Length or by counting a streamed body; 408 for a
    body that has not fully arrived ``timeout_s`` after the request started."""

    def __init__(self, app: Any, max_bytes: int, timeout_s: float = 30.0) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.timeout_s = timeout_s

    async def __call__(
        self, scope: dict[str, Any], receive: Callable[[], Awaitable[dict[str, Any]]], send: Any
    ) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope.get("headers") or []).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_bytes:
            await self._reject(send, 413, "too_large", f"request body over {self.max_bytes} bytes")
            return
        seen = 0
        deadline = time.monotonic() + self.timeout_s
        complete = False

        async def counted() -> dict[str, Any]:
            nonlocal seen, complete
            if complete:  # after the body: waiting for a disconnect (SSE) has no deadline
                return await receive()
            try:
                async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                    msg = await receive()
            except TimeoutError:
                raise _SlowBody(self.timeout_s) from None
            if msg["type"] == "http.request":
                seen += len(msg.get("body", b""))
                complete = not msg.get("more_body", False)
                if seen > self.max_bytes:
                    raise _TooLarge(self.max_bytes)
            return msg

        try:
            await self.app(scope, counted, send)
        except _TooLarge:
            await self._reject(send, 413, "too_large", f"request body over {self.max_bytes} bytes")
        except _SlowBody:
            await self._reject(
                send, 408, "request_timeout", f"the request body did not arrive within {self.timeout_s:g} s"
            )

    async def _reject(self, send: Any, status: int, code: str, message: str) -> None:
        body = orjson.dumps({"error": {"code": code, "message": message}})
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-type", b"application/json"), (b"connection", b"close")],
            }
        )
        await send({"type": "http.response.body", "body": body})


class _TooLarge(StarletteHTTPException):
    """Raised while the body streams in (no Content-Length). An HTTPException, so FastAPI's body
    parsing lets it through as a 413 instead of turning it into a 400 "error parsing the body"."""

    def __init__(self, max_bytes: int) -> None:
        super().__init__(413, f"request body over {max_bytes} bytes")


class _SlowBody(StarletteHTTPException):
    def __init__(self, timeout_s: float) -> None:
        super().__init__(408, f"the request body did not arrive within {timeout_s:g} s")


class Observe:
    """Each request counted, by method, route and status, with its time to its response's start (the
    app's metrics: requests that never reach Redis too). Plain ASGI: a function middleware
    (``app.middleware("http")``, Starlette's BaseHTTPMiddleware) runs the app in a task of its own
    behind memory streams, more turns of the loop and more CPU for every request.

    A method outside HTTP's (metrics.METHODS), which no route serves, is answered 405 here, before
    routing, error handlers and the other middleware: half the CPU of a flood of made-up methods
    (counted under route ``unmatched``)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(
        self, scope: dict[str, Any], receive: Callable[[], Awaitable[dict[str, Any]]], send: Any
    ) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        t0 = time.perf_counter()
        counted = False

        def count(status: int) -> None:
            nonlocal counted
            counted = True
            path = getattr(scope.get("route"), "path", "unmatched")
            scope["app"].state.metrics.request(scope["method"], path, status, time.perf_counter() - t0)

        async def sent(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start" and not counted:
                count(message["status"])
            await send(message)

        if scope["method"] not in METHODS:
            await error_response(405, "method_not_allowed", "Method Not Allowed")(scope, receive, sent)
            return
        try:
            await self.app(scope, receive, sent)
        except Exception:
            if not counted:
                count(500)  # the server's error page answers it
            raise
