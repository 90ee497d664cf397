"""Which tools a profile has, what the model is told about them, and how a call is executed:
schema check first, then the tool with a per-call timeout and retries of retryable failures.

A profile's tools are its built-ins, its HTTP tools and the tools its MCP servers list
(worker/tools/mcp.py), offered as ``<server>__<tool>``; the listing is asked for when a run
starts (``Toolbox.specs``, kept per server for its ``toolsTtlS``). An MCP tool's spec names its
listing's hash, and the listing is kept once for every run (worker/tools/mcp_listings.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import httpx
import orjson

from agentmill_client import limits
from agentmill_client.models import ToolCall, ToolResult
from shared.profiles import AgentProfile, ToolSettings
from worker.adapters.lease import LeaseExpiredError
from worker.core.config import RunConfig, ToolSpec
from worker.core.policy import argument_problem
from worker.core.tool_retry import ToolRetry
from worker.tools.base import Tool, ToolContext, ToolError, ToolOutcome
from worker.tools.builtin import BUILTINS
from worker.tools.mcp_listings import McpListing, McpListings, Relisted, listing_of

if TYPE_CHECKING:
    from shared.profiles import McpServerConfig
    from worker.tools.mcp import McpServer

__all__ = ["ProfileTools", "ToolRetry", "Toolbox"]


class ProfileTools:
    """The tools of one profile, built once per worker and shared by its runs."""

    def __init__(
        self,
        profile: AgentProfile,
        http: httpx.AsyncClient | None = None,
        mcp: Callable[[McpServerConfig], McpServer] | None = None,
        listings: McpListings | None = None,
    ) -> None:
        self.profile = profile
        self.tools: dict[str, Tool] = {}
        self.servers: dict[str, McpServer] = {}
        self.listings = listings or McpListings()
        self._listed: dict[str, tuple[object, McpListing]] = {}  # server -> (its tools dict, their listing)
        if profile.mcp_servers:
            if mcp is None:
                raise ValueError("MCP servers need the worker's MCP connections")
            self.servers = {s.name: mcp(s) for s in profile.mcp_servers}
        for name in profile.tools:
            if name not in BUILTINS:
                raise ValueError(f"profile {profile.name!r}: no built-in tool named {name!r}")
            self.tools[name] = BUILTINS[name]
        for cfg in profile.http_tools:
            from worker.tools.http import HttpTool

            if http is None:
                raise ValueError("HTTP tools need the worker's HTTP client")
            self.tools[cfg.name] = HttpTool(cfg, profile.settings_for(cfg.name), http)
        self.specs = {
            n: ToolSpec(name=n, description=t.description, parameters=t.parameters)
            for n, t in self.tools.items()
        }

    async def all_specs(self) -> dict[str, ToolSpec]:
        """The profile's own tools, then each MCP server's (listed now, or as kept)."""
        if not self.servers:
            return self.specs
        await asyncio.gather(*(s.list() for s in self.servers.values()))
        specs = dict(self.specs)
        for name in self.servers:
            for n, spec in self.listing(name).specs.items():
                specs.setdefault(n, spec)
        return specs

    def listing(self, server: str) -> McpListing:
        """The server's listing as this worker holds it now, hashed once per listing."""
        tools = self.servers[server].tools
        held = self._listed.get(server)
        if held is None or held[0] is not tools:
            held = self._listed[server] = (tools, self.listings.add(listing_of(server, tools)))
        return held[1]

    async def relist(self, server: str) -> McpListing | None:
        """The server's listing, asked for unless the one held is fresh (None: no such server)."""
        if server not in self.servers:
            return None
        await self.servers[server].list()
        return self.listing(server)

    def _tool(self, name: str) -> Tool | None:
        tool = self.tools.get(name)
        if tool is None and (cfg := self.profile.mcp_server_of(name)) is not None:
            tool = self.servers[cfg.name].tool_for(name)
        return tool

    def settings(self, name: str) -> ToolSettings:
        return self.profile.settings_for(name)

    def check_arguments(self, name: str, args: Any) -> str | None:
        """Why ``args`` do not fit the tool's schema (an MCP tool's: its server's), or None; a schema
        past its bounds (shared/schema_bounds.py) is the problem, named."""
        if not isinstance(args, dict):
            return "arguments must be a JSON object"
        tool = self._tool(name)
        return argument_problem(tool.parameters if tool else {}, args)

    async def execute(
        self,
        call: ToolCall,
        ctx: ToolContext,
        on_retry: Any = None,
    ) -> ToolResult:
        """Never raises for a tool's failure: failures become error results the model sees."""
        tool = self._tool(call.name)
        if tool is None:
            return _err(call, f"error: tool {call.name!r} is not available")
        try:
            args = orjson.loads(call.arguments or "{}")
        except orjson.JSONDecodeError as exc:
            return _err(call, f"error: arguments are not valid JSON ({exc})")
        problem = self.check_arguments(call.name, args)
        if problem is not None:
            return _err(call, f"error: invalid arguments: {problem}")
        st = self.settings(call.name)
        attempt = 1
        while True:
            try:
                actx = ToolContext(
                    ctx.run_id,
                    ctx.session_id,
                    ctx.tool_call_id,
                    ctx.idempotency_key,
                    attempt,
                    ctx.init_data,
                    ctx.fencing_token,
                )
                outcome: ToolOutcome = await asyncio.wait_for(tool(args, actx), st.timeout_s)
                return ToolResult(
                    tool_call_id=call.id,
                    name=call.name,
                    content=_bound(outcome.content),
                    is_error=outcome.is_error,
                )
            except ToolError as exc:
                reason, retryable = str(exc), exc.retryable
            except TimeoutError:
                reason, retryable = f"timed out after {st.timeout_s:g} s", True
            except (asyncio.CancelledError, LeaseExpiredError):
                raise
            except Exception as exc:  # a tool bug must not crash the run
                reason, retryable = f"{type(exc).__name__}: {exc}", False
            if not retryable or attempt >= st.max_tries:
                suffix = f" (after {attempt} attempts)" if attempt > 1 else ""
                return _err(call, f"error: {reason}{suffix}")
            if on_retry is not None:
                await on_retry(ToolRetry(call, attempt, reason))
            attempt += 1
            await asyncio.sleep(st.retry_delay_ms / 1000.0)


def _bound(text: str) -> str:
    if len(text) <= limits.MAX_TOOL_RESULT_CHARS:
        return text
    return text[: limits.MAX_TOOL_RESULT_CHARS] + "…[truncated]"


def _err(call: ToolCall, text: str) -> ToolResult:
    return ToolResult(tool_call_id=call.id, name=call.name, content=_bound(text), is_error=True)


class Toolbox:
    """ToolPort: the tools of each profile (built on first use); HTTP tools and MCP servers use the
    guarded client. ``mcp``: how an MCP server is reached (default: through the guarded client;
    tests replay recorded answers), ``on_mcp_call``: the metrics hook of each tools/call."""

    def __init__(
        self,
        http: httpx.AsyncClient | None,
        *,
        mcp: Callable[[McpServerConfig], McpServer] | None = None,
        on_mcp_call: Callable[[str, str, float], None] | None = None,
        watch: bool = False,
        listings: McpListings | None = None,
    ) -> None:
        self.http = http
        self.listings = listings or McpListings()  # the MCP listings runs' configurations name
        self.watch = watch  # listen for tools/list_changed (the worker's; aclose stops it)
        self.on_mcp_call = on_mcp_call
        self.mcp = mcp or self._mcp_server
        self._tools: dict[str, ProfileTools] = {}

    def _mcp_server(self, cfg: McpServerConfig) -> McpServer:
        from worker.tools.mcp import McpServer
        from worker.tools.mcp_transport import GuardedMcpTransport

        if self.http is None:
            raise ValueError("MCP servers need the worker's HTTP client")
        transport = GuardedMcpTransport(self.http, allow_hosts=cfg.allow_hosts)
        return McpServer(cfg, transport, observe=self.on_mcp_call, watch=self.watch)

    def _of(self, profile: AgentProfile) -> ProfileTools:
        t = self._tools.get(profile.name)
        if t is None:
            t = self._tools[profile.name] = ProfileTools(profile, self.http, self.mcp, self.listings)
        return t

    async def specs(self, profile: AgentProfile) -> dict[str, ToolSpec]:
        return await self._of(profile).all_specs()

    async def keep_listings(self, config: RunConfig) -> None:
        await self.listings.keep(config)

    async def fill_listings(
        self, profile: AgentProfile | None, config: RunConfig
    ) -> tuple[RunConfig, list[Relisted]]:
        async def relist(server: str) -> McpListing | None:
            return None if profile is None else await self._of(profile).relist(server)

        return await self.listings.fill(config, relist)

    async def aclose(self) -> None:
        """Stops the MCP servers' listen streams."""
        for tools in self._tools.values():
            for server in tools.servers.values():
                await server.aclose()

    async def execute(
        self,
        profile: AgentProfile,
        call: ToolCall,
        ctx: ToolContext,
        on_retry: Callable[[ToolRetry], Awaitable[None]] | None = None,
    ) -> ToolResult:
        return await self._of(profile).execute(call, ctx, on_retry)
