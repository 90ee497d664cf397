"""Tools from MCP servers (a profile's ``mcpServers``), through the official ``mcp`` SDK over
streamable HTTP.

One ``McpServer`` per profile and server on a worker: it lists the server's tools (kept for
``toolsTtlS``; a failed listing serves the last one it had), offers each allowed one as an
``McpTool`` named ``<server>__<tool>`` with the server's input schema (a server that sends
tools/list_changed makes the listing stale at once), and sends ``tools/call``
with ``Idempotency-Key: <runId>:<toolCallId>`` (and ``Agentmill-Fencing-Token``) on the HTTP
request and ``_meta.idempotencyKey`` in the call's params, the same key every time the call is
sent again. Each operation is a connection of its own (at the 2026-07-28 revision one POST, the
version found by the first one pinned), so a per-call header needs no shared session state and a
server that restarted costs nothing to reconnect to. What comes back: ``isError`` an error result,
an MCP error a plain failure, a server that cannot be reached or answers 5xx a retryable failure
(the tool's retry policy, then an error result to the model). A listing's pages are read in
mcp_pages.py, a failure classified in mcp_failures.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult, DiscoverResult, ListToolsResult, RequestParamsMeta
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from shared.profiles import MCP_SEP, McpServerConfig
from shared.schema_compiling import SchemaQueueFullError, compile_all
from worker.adapters.lease import LeaseExpiredError
from worker.telemetry import tracing
from worker.tools.base import ToolContext, ToolError, ToolOutcome
from worker.tools.mcp_bounds import (
    ListingRefusedError,
)
from worker.tools.mcp_content import render
from worker.tools.mcp_failures import call_failure, innermost, unchecked
from worker.tools.mcp_output import check_result, check_schema
from worker.tools.mcp_pages import read_pages
from worker.tools.mcp_transport import REFUSALS, McpConfigError, expand_headers

__all__ = [
    "FAILED_LISTING_S",
    "LIST_CHANGED_INTERVAL_S",
    "McpServer",
    "McpTool",
]

log = logging.getLogger("agentmill.mcp")

# tools/list_changed: the listing is asked for again at most once per interval per server, and at
# most one line per interval is logged (with how many notices came since the last one).
LIST_CHANGED_INTERVAL_S = 5.0
FAILED_LISTING_S = 5.0  # a failed listing is asked again after this (toolsTtlS if shorter; refused: longer)
McpObserver = Callable[[str, str, float], None]  # (server, outcome ok|error|failed, seconds)


class McpTool:
    """One MCP server tool as the ToolPort sees it."""

    def __init__(
        self, server: McpServer, remote: str, name: str, description: str, parameters: dict[str, Any]
    ) -> None:
        self.server = server
        self.remote = remote  # the tool's name on its server
        self.name = name
        self.description = description
        self.parameters = parameters

    def __repr__(self) -> str:
        return f"McpTool({self.name!r} → {self.server.cfg.url} {self.remote!r})"

    async def __call__(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
        return await self.server.call(self.remote, args, ctx)


class McpServer:
    """One profile's MCP server on this worker."""

    def __init__(
        self,
        cfg: McpServerConfig,
        transport: httpx2.AsyncBaseTransport,
        *,
        observe: McpObserver | None = None,
        clock: Callable[[], float] = time.monotonic,
        watch: bool = False,
        changed_interval_s: float = LIST_CHANGED_INTERVAL_S,
    ) -> None:
        self.cfg = cfg
        self.transport = transport
        self.observe = observe
        self.clock = clock
        self.tools: dict[str, McpTool] = {}  # by exposed name, from the last listing
        self.listed_at: float | None = None
        self._listing = asyncio.Lock()
        self._slots = asyncio.Semaphore(cfg.max_concurrent) if cfg.max_concurrent else None
        self._discover: tuple[str, DiscoverResult] | None = None  # the modern version found, pinned
        self._pages: list[ListToolsResult] = []  # the last listing as the server sent it
        self.output_schemas: dict[str, dict[str, Any]] = {}  # by the tool's name on its server
        self._watcher: asyncio.Task[None] | None = None
        self.watching = watch
        self.refused: ListingRefusedError | None = None  # why the last listing was refused
        self.changed_interval_s = changed_interval_s
        self._changed = False  # a tools/list_changed not yet acted on
        self._changed_relist_at = float("-inf")  # when a change last made the listing stale
        self._heard = 0  # notices since the last line logged
        self._logged_at = float("-inf")
        self.relists = 0  # listings asked of the server (the first and every one after)

    def stale(self) -> None:
        """Forget the listing's age: the next ``list`` asks the server."""
        self.listed_at = None

    def changed(self) -> None:
        """A tools/list_changed: the listing is stale, at most once per ``changed_interval_s`` (a
        notice within it is acted on when it is over); one line logged per interval at most."""
        now = self.clock()
        self._changed = True
        self._heard += 1
        if now - self._logged_at >= self.changed_interval_s:
            log.info("MCP server %s: tools/list_changed (%d since the last line)", self.cfg.name, self._heard)
            self._heard, self._logged_at = 0, now

    def _changes_due(self, now: float) -> bool:
        return self._changed and now - self._changed_relist_at >= self.changed_interval_s

    def watch(self) -> None:
        """Listen for the server's tools/list_changed (2026-07-28 ``subscriptions/listen``) and make
        the listing stale on each; started after the first listing, when the server says it sends
        them. Owned here: ``aclose`` cancels it."""
        if self._watcher is None and self._lists_changes():
            self._watcher = asyncio.create_task(self._watch(), name=f"mcp-watch-{self.cfg.name}")

    def _lists_changes(self) -> bool:
        found = self._discover[1] if self._discover is not None else None
        tools = found.capabilities.tools if found is not None else None
        return bool(tools is not None and tools.list_changed)

    async def _watch(self) -> None:
        delay = 1.0
        while True:
            try:
                async with (
                    self._connect({}, stream=True) as client,
                    client.listen(tools_list_changed=True) as sub,
                ):
                    delay = 1.0
                    async for _ in sub:
                        self.changed()
            except asyncio.CancelledError:
                raise
            except BaseException as exc:
                if isinstance(innermost(exc), asyncio.CancelledError):
                    raise
                log.debug("MCP server %s: listen stream ended: %r", self.cfg.name, innermost(exc))
            self.stale()  # a change may have come while the stream was down
            await asyncio.sleep(delay)
            delay = min(60.0, delay * 2)

    async def aclose(self) -> None:
        if self._watcher is not None:
            self._watcher.cancel()
            with contextlib.suppress(BaseException):
                await self._watcher
            self._watcher = None

    @contextlib.asynccontextmanager
    async def _connect(self, extra: dict[str, str], *, stream: bool = False) -> AsyncIterator[Client]:
        """A connection for one operation (``stream``: a listen stream, no read timeout)."""
        headers = {**expand_headers(self.cfg.headers), **extra}
        if not stream:  # a call's execute_tool span (a listing's: the run attempt's), when traces are on
            tracing.inject(headers)
        connect_s = min(10.0, self.cfg.timeout_s)
        timeout = httpx2.Timeout(None if stream else self.cfg.timeout_s, connect=connect_s)
        async with httpx2.AsyncClient(
            transport=self.transport, headers=headers, timeout=timeout, trust_env=False
        ) as http:
            pinned = self._discover
            client = Client(
                streamable_http_client(self.cfg.url, http_client=http),
                mode=pinned[0] if pinned else "auto",
                prior_discover=pinned[1] if pinned else None,
                read_timeout_seconds=self.cfg.timeout_s,
                cache=None,
            )
            try:
                async with client:
                    version = client.protocol_version
                    found = client.session.discover_result
                    if pinned is None and version in MODERN_PROTOCOL_VERSIONS and found is not None:
                        self._discover = (version, found)
                    yield client
            except BaseException:
                self._discover = None  # found again next time (the server may have changed)
                raise

    async def list(self) -> dict[str, McpTool]:
        """The allowed tools by exposed name: the listing kept for ``toolsTtlS``, else asked for."""
        async with self._listing:
            now = self.clock()
            fresh = self.listed_at is not None and now - self.listed_at < self.cfg.tools_ttl_s
            if fresh and not self._changes_due(now):
                return self.tools
            if self._changes_due(now):
                self._changed, self._changed_relist_at = False, now
            try:
                self.relists += 1
                self.tools = await self._list()
                self.refused = None
                self.listed_at = self.clock()
                if self.watching:
                    self.watch()
            except asyncio.CancelledError:
                raise
            except McpConfigError:
                raise
            except BaseException as exc:
                leaf = innermost(exc)
                if isinstance(leaf, asyncio.CancelledError | LeaseExpiredError):
                    raise leaf from None
                if isinstance(leaf, ListingRefusedError):
                    log.warning("MCP server %s (%s): tools/list refused: %s; none of its tools are offered",
                                self.cfg.name, self.cfg.url, leaf)  # fmt: skip
                    self.refused, self.tools = leaf, {}
                    # asked again after toolsTtlS (FAILED_LISTING_S at least) or a tools/list_changed
                    self.listed_at = self.clock() + max(0.0, FAILED_LISTING_S - self.cfg.tools_ttl_s)
                    return self.tools
                log.warning("MCP server %s (%s): tools/list failed: %s: %s; serving %d tools listed before",
                            self.cfg.name, self.cfg.url, type(leaf).__name__, leaf, len(self.tools))  # fmt: skip
                # Asked again after FAILED_LISTING_S (not at every run start while the server is down).
                self.listed_at = self.clock() - max(0.0, self.cfg.tools_ttl_s - FAILED_LISTING_S)
            return self.tools

    async def _list(self) -> dict[str, McpTool]:
        """The listing; a page refused unparsed (worker/tools/mcp_listing_shape.py) raises that."""
        refused: list[Exception] = []
        token = REFUSALS.set(refused)
        try:
            return await self._pages_read()
        except Exception:
            if refused:
                raise refused[0] from None
            raise
        finally:
            REFUSALS.reset(token)

    async def _pages_read(self) -> dict[str, McpTool]:
        async with self._connect({}) as client:
            got = await read_pages(client, self.cfg)
        self._pages = got.pages
        self.output_schemas = got.output_schemas
        return {
            name: McpTool(self, tool.remote, name, tool.description, tool.parameters)
            for name, tool in got.tools.items()
        }

    def _prime(self, client: Client) -> None:
        """Give a new connection the listing this worker holds, as if it had listed itself: the SDK
        checks a result against the tool's output schema and mirrors ``x-mcp-header`` arguments
        into headers from it, and would otherwise list the tools again before every call's answer.
        The SDK's own check of a result against the output schema is turned off: ``call`` checks it
        on the bounded validator (worker/tools/mcp_output.py)."""
        with contextlib.suppress(AttributeError):
            client.session.validate_tool_result = unchecked  # type: ignore[method-assign]
        absorb = getattr(client.session, "_absorb_tool_listing", None)
        if not callable(absorb):  # a later SDK without it: the SDK lists the tools itself
            return
        for page in self._pages:
            absorb(page.model_copy(deep=True), complete=len(self._pages) == 1)

    def tool_for(self, exposed: str) -> McpTool | None:
        """The tool behind an exposed name: from the listing, else (a run resumed on a worker that
        has not listed yet) by the name's tool part, if allowTools allows it."""
        got = self.tools.get(exposed)
        if got is not None:
            return got
        remote = exposed.partition(MCP_SEP)[2]
        if not remote or (self.cfg.allow_tools is not None and remote not in self.cfg.allow_tools):
            return None
        return McpTool(self, remote, exposed, "", {"type": "object"})

    async def call(self, remote: str, args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
        name = f"{self.cfg.name}{MCP_SEP}{remote}"
        if self.refused is not None:
            raise ToolError(f"{name}: the server's tool listing was refused: {self.refused}")
        schema = self.output_schemas.get(remote)
        if schema is not None:
            with contextlib.suppress(SchemaQueueFullError):  # else compiled inline by check_schema
                await compile_all([schema])  # off the loop (shared/schema_compiling.py)
        check_schema(name, schema)
        async with self._slots if self._slots is not None else contextlib.nullcontext():
            t0 = self.clock()
            outcome = "failed"
            try:
                result = await self._call(remote, args, ctx)
                check_result(name, schema, result)
                outcome = "error" if result.is_error else "ok"
            finally:
                if self.observe is not None:
                    self.observe(self.cfg.name, outcome, self.clock() - t0)
        return ToolOutcome(render(result), is_error=result.is_error)

    async def _call(self, remote: str, args: dict[str, Any], ctx: ToolContext) -> CallToolResult:
        name = f"{self.cfg.name}{MCP_SEP}{remote}"
        extra = {"Idempotency-Key": ctx.idempotency_key, "Agentmill-Fencing-Token": str(ctx.fencing_token)}
        refused: list[Exception] = []
        token = REFUSALS.set(refused)
        try:
            async with self._connect(extra) as client:
                self._prime(client)
                return await client.call_tool(
                    remote, args, read_timeout_seconds=self.cfg.timeout_s,
                    meta=RequestParamsMeta(idempotencyKey=ctx.idempotency_key),  # type: ignore[typeddict-unknown-key]
                )  # fmt: skip
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            raise call_failure(name, refused[0] if refused else innermost(exc)) from None
        finally:
            REFUSALS.reset(token)
