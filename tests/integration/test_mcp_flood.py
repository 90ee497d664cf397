"""An MCP server that tries to flood the worker (tests/support/mcp_flood_server.py, the ``mcp``
package's own server in a process of its own): a listing past the bounds is refused or trimmed as
docs/api.md says, an answer of 148,000 tiny blocks is refused before it is parsed (the event loop
never blocked for long), and a storm of 20,000 tools/list_changed costs a handful of listings and
log lines."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from agentmill_client.models import ToolCall
from shared.netguard import guarded_client
from shared.profiles import AgentProfile, McpServerConfig
from tests.support.mcp_flood_server import flood_server
from worker.tools import mcp_bounds
from worker.tools.base import ToolContext
from worker.tools.mcp import FAILED_LISTING_S, McpServer
from worker.tools.mcp_transport import GuardedMcpTransport
from worker.tools.registry import Toolbox

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


@asynccontextmanager
async def toolbox(url: str) -> AsyncIterator[tuple[Toolbox, AgentProfile]]:
    http = guarded_client()
    cfg = McpServerConfig(name="srv", url=url, allow_hosts=["127.0.0.1"])
    try:
        yield Toolbox(http), AgentProfile(name="p", mcp_servers=[cfg])
    finally:
        await http.aclose()


async def call(box: Toolbox, prof: AgentProfile, name: str, args: str) -> tuple[bool, str]:
    ctx = ToolContext("run_f", None, "c1.0", "run_f:c1.0", 1)
    res = await box.execute(prof, ToolCall(id="c1.0", name=name, arguments=args), ctx)
    return res.is_error, res.content


async def test_a_listing_of_too_many_tools_is_refused_and_a_call_names_the_bound(tmp_path: Path) -> None:
    with flood_server(tmp_path, tools=mcp_bounds.MAX_TOOLS + 50, schema_bytes=100, page=100) as srv:
        async with toolbox(srv.url) as (box, prof):
            assert await box.specs(prof) == {}
            err, text = await call(box, prof, "srv__blocks", '{"n": 1}')
    assert err and "more than 256 tools" in text and "maxTools" in text, text


async def test_a_page_of_too_many_tools_is_refused_before_it_is_parsed(tmp_path: Path) -> None:
    # 1,000 tools of 2 kB in one page: parsed by the SDK before the count refused them, about 30 ms
    # of CPU in one turn of the loop; counted as the bytes arrive, about 3 ms.
    with flood_server(tmp_path, tools=1_000, schema_bytes=2_000, page=1_000) as srv:
        async with toolbox(srv.url) as (box, prof):
            box_specs = box.specs(prof)
            lags: list[float] = []
            done = asyncio.Event()

            async def probe() -> None:  # the loop's CPU time between two turns of this task
                while not done.is_set():
                    t = time.thread_time()
                    await asyncio.sleep(0.001)
                    lags.append(time.thread_time() - t)

            prober = asyncio.create_task(probe())
            try:
                assert await box_specs == {}
                err, text = await call(box, prof, "srv__blocks", '{"n": 1}')
            finally:
                done.set()
                await prober
    assert err and "more than 256 tools" in text and "maxTools" in text, text
    assert max(lags) < 0.015, f"the loop was blocked for {max(lags) * 1000:.0f} ms of CPU"


async def test_a_refused_listing_is_not_asked_for_at_every_run_even_with_no_ttl(tmp_path: Path) -> None:
    # toolsTtlS 0 (figure 9's MCP attack): a refused listing was asked for, sent whole and refused
    # again at every run start; now at most once per FAILED_LISTING_S.
    now = [0.0]
    with flood_server(tmp_path, tools=mcp_bounds.MAX_TOOLS + 50, schema_bytes=100, page=1_000) as srv:
        http = guarded_client()
        cfg = McpServerConfig(name="srv", url=srv.url, allow_hosts=["127.0.0.1"], tools_ttl_s=0)
        server = McpServer(cfg, GuardedMcpTransport(http, allow_hosts=cfg.allow_hosts), clock=lambda: now[0])
        try:
            for _ in range(5):
                assert await server.list() == {}
                now[0] += 1.0
            assert server.relists == 1 and server.refused is not None
            now[0] += FAILED_LISTING_S
            assert await server.list() == {}
            assert server.relists == 2
        finally:
            await server.aclose()
            await http.aclose()


async def test_too_many_pages_or_bytes_refuse_the_listing_and_a_huge_schema_leaves_its_tool_out(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "agentmill.mcp")
    with flood_server(tmp_path, tools=mcp_bounds.MAX_PAGES + 5, schema_bytes=100, page=1) as srv:
        async with toolbox(srv.url) as (box, prof):
            assert await box.specs(prof) == {}
    assert "maxPages" in caplog.text
    many = (
        mcp_bounds.MAX_LISTING_BYTES // 50_000 + 5
    )  # each under the tool's bound, over the listing's together
    with flood_server(tmp_path, tools=many, schema_bytes=50_000) as srv:
        async with toolbox(srv.url) as (box, prof):
            assert await box.specs(prof) == {}
    assert "maxListingBytes" in caplog.text
    with flood_server(tmp_path, tools=3, schema_bytes=mcp_bounds.MAX_TOOL_BYTES + 1) as srv:
        async with toolbox(srv.url) as (box, prof):
            offered = set(await box.specs(prof))
    assert offered == {"srv__blocks", "srv__storm"}  # t0..t2 left out, each logged
    assert caplog.text.count("not offered") == 3


async def test_an_answer_of_148000_blocks_is_an_error_result_and_the_loop_never_waits_long(
    tmp_path: Path,
) -> None:
    with flood_server(tmp_path) as srv:
        async with toolbox(srv.url) as (box, prof):
            await box.specs(prof)
            assert await call(box, prof, "srv__blocks", '{"n": 3}') == (False, "x\nx\nx")
            lags: list[float] = []
            done = asyncio.Event()

            async def probe() -> None:  # the loop's CPU time between two turns of this task
                while not done.is_set():  # (CPU, not wall time: the machine's load is not the loop's)
                    t = time.thread_time()
                    await asyncio.sleep(0.001)
                    lags.append(time.thread_time() - t)

            prober = asyncio.create_task(probe())
            try:
                err, text = await call(box, prof, "srv__blocks", '{"n": 148000}')
            finally:
                done.set()
                await prober
    assert err and "more than 5000 JSON objects and arrays" in text and "maxAnswerItems" in text, text
    assert max(lags) < 0.1, f"the loop was blocked for {max(lags) * 1000:.0f} ms of CPU"


async def test_a_storm_of_20000_list_changed_costs_a_handful_of_listings_and_lines(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "agentmill.mcp")
    with flood_server(tmp_path) as srv:
        http = guarded_client()
        cfg = McpServerConfig(name="srv", url=srv.url, allow_hosts=["127.0.0.1"])
        server = McpServer(cfg, GuardedMcpTransport(http, allow_hosts=cfg.allow_hosts), watch=True,
                           changed_interval_s=1.0)  # fmt: skip
        try:
            first = time.monotonic()
            await server.list()
            assert server._watcher is not None  # the server says it sends tools/list_changed
            await asyncio.sleep(0.5)  # its listen stream open
            ctx = ToolContext("run_s", None, "c1.0", "run_s:c1.0", 1)
            t0 = time.monotonic()
            storm = asyncio.create_task(server.call("storm", {"n": 20_000}, ctx))
            while not storm.done():  # a run starting every 10 ms meanwhile
                await server.list()
                await asyncio.sleep(0.01)
            assert (await storm).content == "sent 20000"
            await asyncio.sleep(1.2)
            await server.list()  # the last notice is acted on once its interval is over
            took = time.monotonic() - t0
        finally:
            await server.aclose()
            await http.aclose()
    lines = [r for r in caplog.records if "tools/list_changed" in r.getMessage()]
    heard = sum(int(r.getMessage().split("(")[1].split()[0]) for r in lines) + server._heard
    assert heard > 0
    assert 1 <= len(lines) <= took / 1.0 + 2, [r.getMessage() for r in lines]
    # the first listing, the first notice's at once, then one per interval at most (the last
    # notice's among them), and one when the listen stream ends (a change may have come while it
    # was down): 4 in about 2 s
    since_first = took + (t0 - first)
    assert 2 <= server.relists <= since_first / 1.0 + 3
