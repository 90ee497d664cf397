"""A real MCP server for the tests: the ``mcp`` package's own server (``MCPServer``, what was
FastMCP) over streamable HTTP, in a process of its own, counting every tools/call.

Each call is appended to a JSON-lines file as it arrives (before the tool runs, so a call whose
caller was killed mid-call is counted): the tool, the ``Idempotency-Key`` header, the
``_meta.idempotencyKey`` param, the ``Agentmill-Fencing-Token`` and ``Authorization`` headers, and
how many ``slow`` calls were under way then (counting itself).

    python -m tests.support.mcp_server PORT CALLS_FILE
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.utilities.types import Image

from tests.support.procs import ROOT
from tests.support.redis_server import free_port

__all__ = ["McpServerProc", "calls", "counts", "mcp_server"]


def calls(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def counts(path: Path) -> Counter[str]:
    """Calls per Idempotency-Key header."""
    return Counter(str(c["key"]) for c in calls(path))


class McpServerProc:
    def __init__(
        self, port: int, calls_file: Path, module: str = __name__, args: tuple[str, ...] | None = None
    ) -> None:
        self.port = port
        self.calls_file = calls_file
        self.argv = [
            sys.executable,
            "-m",
            module,
            str(port),
            *(args if args is not None else [str(calls_file)]),
        ]
        self.url = f"http://127.0.0.1:{port}/mcp"
        self.proc: Any = None

    def start(self, within_s: float = 30.0) -> McpServerProc:
        """Forked from the test process's fork server (tests/support/forkserver.py), which imports
        the SDK once for every server the process starts (a fresh interpreter took 3-8 s a start
        under load); waits until the port answers."""
        import socket

        from tests.support import forkserver

        with open(self.calls_file.with_suffix(".log"), "ab") as log:  # the child keeps its own copy
            self.proc = forkserver.popen(self.argv[1:], cwd=ROOT, stdout=log, stderr=log)
        deadline = time.monotonic() + within_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"the MCP server exited: {self.calls_file.with_suffix('.log').read_text()}"
                )
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return self
            time.sleep(0.02)
        raise RuntimeError("the MCP server did not start")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


@contextmanager
def mcp_server(tmp: Path) -> Iterator[McpServerProc]:
    srv = McpServerProc(free_port(), tmp / "mcp_calls.jsonl").start()
    try:
        yield srv
    finally:
        srv.stop()


def main(port: int, calls_file: str) -> None:
    srv = MCPServer("agentmill-test")

    inflight = [0]  # slow calls under way now

    def note(ctx: Context, tool: str) -> None:
        headers = {k.lower(): v for k, v in (ctx.headers or {}).items()}
        meta = ctx.request_context.meta or {}
        line = {"tool": tool, "key": headers.get("idempotency-key"), "metaKey": meta.get("idempotencyKey"),
                "fencing": headers.get("agentmill-fencing-token"), "auth": headers.get("authorization"),
                "inflight": inflight[0], "traceparent": headers.get("traceparent")}  # fmt: skip
        with open(calls_file, "ab") as f:
            f.write(orjson.dumps(line) + b"\n")

    @srv.tool()
    def add(a: int, b: int, ctx: Context) -> int:
        """Add two integers."""
        note(ctx, "add")
        return a + b

    @srv.tool()
    async def slow(ms: int, ctx: Context) -> str:
        """Wait ms milliseconds, then answer."""
        inflight[0] += 1
        try:
            note(ctx, "slow")
            await asyncio.sleep(ms / 1000.0)
        finally:
            inflight[0] -= 1
        return f"waited {ms} ms"

    @srv.tool()
    def boom(ctx: Context) -> str:
        """Always fails."""
        note(ctx, "boom")
        raise ValueError("the boom tool failed on purpose")

    @srv.tool()
    def picture(ctx: Context) -> Image:
        """A tiny picture."""
        note(ctx, "picture")
        return Image(data=b"\x89PNG\r\n\x1a\n" + b"x" * 92, format="png")

    @srv.tool()
    def whoami(ctx: Context) -> dict[str, Any]:
        """Tells which Authorization header it got."""
        note(ctx, "whoami")
        return {"authorization": (ctx.headers or {}).get("authorization")}

    @srv.tool()
    def hidden(ctx: Context) -> str:
        """A tool the profile does not allow."""
        note(ctx, "hidden")
        return "you should not see this"

    @srv.tool()
    async def grow(ctx: Context) -> str:
        """Adds the tool extra and tells the listeners (tools/list_changed)."""
        note(ctx, "grow")

        def extra() -> str:
            """Added by grow."""
            return "extra"

        srv.add_tool(extra, name="extra")
        await ctx.notify_tools_changed()
        return "grown"

    srv.run("streamable-http", host="127.0.0.1", port=port)


if __name__ == "__main__":
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]  # the log, as it happens
    main(int(sys.argv[1]), sys.argv[2])
