"""The HTTP under the MCP SDK: every request it sends goes out through the worker's guarded client.

The ``mcp`` SDK speaks ``httpx2``; the outbound guard (shared/netguard.py) is an ``httpx`` client.
``GuardedMcpTransport`` is the ``httpx2`` transport the SDK is given: for each request (each hop of
a redirect the SDK follows is a request of its own) it checks the destination under the server's
``allowHosts`` exactly as for HTTP tools, sends it through the guarded client's pool of that
destination, and hands the answer back as a stream read under a byte cap. Profile header values
are expanded here from the worker's environment (``${env:NAME}``, or the whole value ``env:NAME``);
nothing a RunInput carries ever reaches them.
"""

from __future__ import annotations

import contextvars
import os
import re
from collections.abc import AsyncIterator, Callable, Collection, Mapping
from typing import Any

import httpx
import httpx2
import orjson

from shared.netguard import DESTINATION, ResponseTooLargeError, checked_destination
from worker.tools.mcp_answer import AnswerShape
from worker.tools.mcp_listing_shape import ListingShape

__all__ = ["REFUSALS", "Exchange", "GuardedMcpTransport", "McpConfigError", "expand_headers"]

# The answers this transport refused (past a byte or shape bound) for the operation under way: the
# SDK turns an error raised inside an SSE stream into "stream ended", so McpServer reads the reason
# here. A list set by the caller before it connects (the SDK's tasks copy the context).
REFUSALS: contextvars.ContextVar[list[Exception] | None] = contextvars.ContextVar(
    "mcp_refusals", default=None
)

_ENV_REF = re.compile(r"\$\{env:([A-Za-z_][A-Za-z0-9_]*)\}")

# What the recorder is handed for each request and its answer (tests/data/mcp).
Exchange = dict[str, Any]


class McpConfigError(ValueError):
    """A profile's MCP server cannot be used as configured (e.g. a header names an unset variable)."""


def expand_headers(headers: Mapping[str, str], env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The header values with ``${env:NAME}`` (anywhere) or ``env:NAME`` (the whole value) read from
    the worker's environment; an unset variable is an error, not an empty credential."""
    env = os.environ if env is None else env

    def var(name: str, header: str) -> str:
        if name not in env:
            raise McpConfigError(f"header {header!r} names the environment variable {name}, which is not set")
        return env[name]

    out: dict[str, str] = {}
    for k, v in headers.items():
        if v.startswith("env:") and "${" not in v:
            out[k] = var(v[4:], k)
        else:
            out[k] = _ENV_REF.sub(lambda m, k=k: var(m.group(1), k), v)  # type: ignore[misc]
    return out


class _Body(httpx2.AsyncByteStream):
    """The guarded response's raw body, cut past ``max_bytes``; closing it closes the response."""

    def __init__(
        self,
        resp: httpx.Response,
        max_bytes: int,
        on_done: Callable[[bytes], None] | None,
        shape: AnswerShape | ListingShape | None = None,
    ) -> None:
        self.resp = resp
        self.max_bytes = max_bytes
        self.on_done = on_done
        self.shape = shape  # a tools/call or tools/list answer's: bounded before it is parsed
        self.seen = bytearray() if on_done is not None else None
        self.n = 0

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self.resp.aiter_raw():
                self.n += len(chunk)
                if self.n > self.max_bytes:
                    raise _refused(ResponseTooLargeError(
                        f"the MCP server's answer is over {self.max_bytes} bytes ({self.resp.url.host})"
                    ))  # fmt: skip
                if self.shape is not None:
                    try:
                        self.shape.feed(chunk)
                    except ValueError as exc:
                        raise _refused(exc) from None
                if self.seen is not None:
                    self.seen += chunk
                yield chunk
        except httpx.TransportError as exc:
            raise _as_httpx2(exc) from None

    async def aclose(self) -> None:
        await self.resp.aclose()
        if self.on_done is not None and self.seen is not None:
            done, self.on_done = self.on_done, None
            done(bytes(self.seen))


def _refused(exc: Exception) -> Exception:
    got = REFUSALS.get()
    if got is not None:
        got.append(exc)
    return exc


def _shape_of(body: bytes) -> AnswerShape | ListingShape | None:
    """What bounds the answer to the request ``body`` in shape, not only in bytes: a tools/call's
    (items and depth) or a tools/list's (tools)."""
    if b"tools/call" not in body and b"tools/list" not in body:
        return None
    try:
        msg = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    method = msg.get("method") if isinstance(msg, dict) else None
    return AnswerShape() if method == "tools/call" else ListingShape() if method == "tools/list" else None


def _as_httpx2(exc: httpx.TransportError) -> httpx2.TransportError:
    """The same failure as the SDK's HTTP library names it (a timeout stays a timeout)."""
    cls = getattr(httpx2, type(exc).__name__, None)
    if not (isinstance(cls, type) and issubclass(cls, httpx2.TransportError)):
        cls = httpx2.TimeoutException if isinstance(exc, httpx.TimeoutException) else httpx2.TransportError
    return cls(str(exc) or type(exc).__name__)


class GuardedMcpTransport(httpx2.AsyncBaseTransport):
    """An ``httpx2`` transport over the worker's guarded ``httpx`` client (which it does not own:
    closing this transport leaves the client open for the next MCP connection)."""

    def __init__(
        self,
        guarded: httpx.AsyncClient,
        *,
        allow_hosts: Collection[str] = (),
        max_bytes: int = 4_000_000,
        record: Callable[[Exchange], None] | None = None,
    ) -> None:
        self.guarded = guarded
        self.allow_hosts = tuple(allow_hosts)
        self.max_bytes = max_bytes
        self.record = record

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        url = str(request.url)
        dest = await checked_destination(self.guarded, url, self.allow_hosts)  # BlockedAddressError
        body = await request.aread()
        extensions = {DESTINATION: dest}
        if "timeout" in request.extensions:
            extensions["timeout"] = request.extensions["timeout"]
        out = self.guarded.build_request(
            request.method, url, headers=request.headers.multi_items(), content=body, extensions=extensions
        )
        try:
            resp = await self.guarded.send(out, stream=True, follow_redirects=False)
        except httpx.TransportError as exc:
            raise _as_httpx2(exc) from None
        on_done = None
        if self.record is not None:
            on_done = self._recorder(request, body, resp)
        return httpx2.Response(
            resp.status_code,
            headers=resp.headers.multi_items(),
            stream=_Body(resp, self.max_bytes, on_done, _shape_of(body)),
        )

    def _recorder(
        self, request: httpx2.Request, body: bytes, resp: httpx.Response
    ) -> Callable[[bytes], None]:
        record = self.record
        assert record is not None
        kept = (
            "idempotency-key",
            "agentmill-fencing-token",
            "mcp-method",
            "mcp-name",
            "mcp-protocol-version",
        )

        def done(answer: bytes) -> None:
            record({
                "method": request.method,
                "headers": {k: v for k, v in request.headers.items() if k.lower() in kept},
                "body": orjson.loads(body) if body else None,
                "status": resp.status_code,
                "contentType": resp.headers.get("content-type", ""),
                "answer": answer.decode("utf-8", "replace"),
            })  # fmt: skip

        return done

    async def aclose(self) -> None:
        """The guarded client belongs to the worker (WorkerDeps closes it)."""
