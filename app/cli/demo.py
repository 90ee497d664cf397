"""The processes ``agentmill worker`` and ``agentmill api``, and the embedded demo (its own Redis,
API and worker; a batch of runs shown as they finish)."""

from __future__ import annotations

import asyncio
import gc
import time
from typing import TYPE_CHECKING, Any

import click
from rich.table import Table

from agentmill_client.models import RunEvent
from agentmill_client.statuses import TERMINAL
from app.cli.common import console, exit_with, print_event, progress_bar, safe_url, say_error
from shared import logs
from shared.settings import Settings, get_settings
from shared.tenants import require_id_secret

if TYPE_CHECKING:
    from agentmill_client.client import AsyncClient

__all__ = ["QUESTIONS", "api", "demo", "worker"]


@click.command(help="Run worker processes (REDIS_URL, AGENTMILL_* settings): one per core unless told.")
@click.option(
    "--processes",
    type=click.IntRange(min=1),
    default=None,
    help="Worker processes under one supervisor (one /metrics for all); 1: this process is the worker "
    "(as in a pod). Default: AGENTMILL_WORKER_PROCESSES, else one per core.",
)
def worker(processes: int | None) -> None:
    from app.worker import processes_for, start_worker

    settings = get_settings()
    # SettingsError: one line and exit code 2 (app.cli.main), before any process starts
    start_worker(settings, processes_for(settings, processes))


@click.command(help="Run the HTTP API on AGENTMILL_API_HOST:AGENTMILL_API_PORT.")
def api() -> None:
    from app.api import create_app
    from producer.api.serve import api_server
    from shared.preflight import check_api

    settings = get_settings()
    require_id_secret(settings)
    check_api(settings)
    logs.configure(json_lines=settings.log_json, level=settings.log_level, process="api")
    app = create_app(settings)
    # What start-up built (modules, pydantic schemas, routes) is never garbage: frozen, the
    # collector's full passes skip it instead of pausing a large batch request for 50-100 ms.
    gc.collect()
    gc.freeze()
    api_server(
        app,
        settings,
        host=settings.api_host,
        port=settings.api_port,
        loop="uvloop",
        log_level="warning",
        access_log=False,
    ).run()


@click.command(help="The embedded demo: own Redis, API and worker; a batch of runs, shown as they finish.")
@click.option("--runs", type=int, default=24, show_default=True)
def demo(runs: int) -> None:
    exit_with(_demo(runs))


QUESTIONS = ["what is {a} * {b}?", "compute {a} + {b} * 2", "({a} - {b}) * 3 = ?", "what's {a} ** 2 - {b}?"]


async def _demo(n: int) -> int:
    from agentmill_client.client import AsyncClient
    from app.api import create_app
    from app.cli.embedded_redis import EmbeddedRedis, EmbeddedRedisError, free_port
    from app.worker import worker_process
    from producer.api.serve import api_server

    logs.configure(level="WARNING")
    t0 = time.monotonic()
    server = None
    given = get_settings()
    url = given.redis_url if "redis_url" in given.model_fields_set else None  # REDIS_URL unset: our own
    if url is None:
        try:
            server = EmbeddedRedis().start()
        except EmbeddedRedisError as exc:
            say_error(str(exc))
            return 2
        url = server.url
    settings = Settings(redis_url=url, auth_disabled=True, poll_delay_s=0.02, worker_metrics_port=-1)
    port = free_port()
    console.print(
        f"[bold]agentmill demo[/]: Redis {safe_url(url)}{' (private)' if server else ''}, API http://127.0.0.1:{port}, one worker"
    )
    api = api_server(
        create_app(settings), settings, host="127.0.0.1", port=port, log_level="error", access_log=False
    )
    api_task = asyncio.create_task(api.serve())
    wp = worker_process(settings)
    worker_task = asyncio.create_task(wp.run())
    try:
        while not api.started:  # noqa: ASYNC110 - uvicorn exposes a flag, not an event
            await asyncio.sleep(0.02)
        async with AsyncClient(f"http://127.0.0.1:{port}") as c:
            items = [
                {"inputMessages": [{"role": "user", "content": QUESTIONS[i % len(QUESTIONS)].format(a=i + 3, b=i % 7 + 2)}],
                 "metadata": {"demo": i}}
                for i in range(n)
            ]  # fmt: skip
            results = await c.submit_batch(items)
            ids = [r.run_id for r in results if r.run_id]
            console.print(f"submitted {len(ids)} runs through POST /v1/runs/batch")
            watched = ids[0]
            tail_lines: list[RunEvent] = []

            async def follow() -> None:
                async for e in c.events(watched):
                    tail_lines.append(e)

            follower = asyncio.create_task(follow())
            views = await _progress(ids, lambda rid: _view_of(c, rid))
            await asyncio.wait_for(follower, 10)
            console.print(
                f"\n[bold]events of run {watched}[/] (GET /v1/runs/{watched}/events, Server-Sent Events):"
            )
            for e in tail_lines:
                print_event(e)
            tool_calls = events = 0
            for rid in ids:
                page = (
                    await c.http.get(f"/v1/runs/{rid}/events", params={"format": "json", "limit": 1000})
                ).json()["events"]
                events += len(page)
                tool_calls += sum(1 for e in page if e["kind"] == "tool_result")
        completed = sum(1 for v in views.values() if v["status"] == "completed")
        table = Table(title="summary", show_header=False)
        table.add_row("runs completed", f"{completed} / {len(ids)}")
        table.add_row("runs failed or aborted", str(len(ids) - completed))
        table.add_row(
            "iterations (model calls)",
            str(sum((v.get("result") or {}).get("iterations", 0) for v in views.values())),
        )
        table.add_row("tool calls", str(tool_calls))
        table.add_row("events published", str(events))
        table.add_row("elapsed", f"{time.monotonic() - t0:.1f} s")
        console.print(table)
        answers = [
            (v.get("result") or {}).get("finalAssistantMessage", {}).get("content", "")
            for v in list(views.values())[:3]
        ]
        console.print("sample answers: " + " | ".join(answers))
        return 0 if completed == len(ids) == n else 1
    finally:
        wp.request_stop()
        api.should_exit = True
        await asyncio.gather(worker_task, api_task, return_exceptions=True)
        if server is not None:
            server.close()


async def _view_of(client: AsyncClient, run_id: str) -> dict[str, Any]:
    """A run's view through the API client, as the JSON the API sent (what _progress reads)."""
    view = await client.get(run_id)
    return dict(view.model_dump(mode="json", by_alias=True, exclude_none=True))


async def _progress(run_ids: list[str], view: Any) -> dict[str, dict[str, Any]]:
    """A progress bar of accepted → completed; returns the final views."""
    views: dict[str, dict[str, Any]] = {}
    with progress_bar() as bar:
        task = bar.add_task("runs", total=len(run_ids))
        pending = set(run_ids)
        while pending:
            got = await asyncio.gather(*(view(r) for r in pending))
            for rid, v in zip(list(pending), got, strict=True):
                if v.get("status") in TERMINAL:
                    views[rid] = v
                    pending.discard(rid)
            failed = sum(1 for v in views.values() if v.get("status") != "completed")
            bar.update(
                task, completed=len(views), description=f"runs ({failed} not completed)" if failed else "runs"
            )
            if pending:
                await asyncio.sleep(0.2)
    return views
