"""The ``agentmill`` command. click for the command tree (arq already depends on it); rich for the
progress bars and readable event lines.

Most commands talk to Redis directly (REDIS_URL); ``--api URL`` makes submit and tail go through
the HTTP API instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import sys
import time
from collections.abc import AsyncIterator, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
import orjson
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from shared import logs
from shared.errors import ApiError
from shared.loop import run as run_loop
from shared.models import RunEvent
from shared.settings import Settings, get_settings
from shared.statuses import TERMINAL, RunStatus

if TYPE_CHECKING:
    from producer.client import AsyncClient

__all__ = ["describe", "main", "print_event"]

console = Console(stderr=False, highlight=False)
err = Console(stderr=True, highlight=False)


def _run(coro: Coroutine[Any, Any, int]) -> None:
    sys.exit(run_loop(coro))


@click.group(help="agentmill: a durable worker pool for LLM agent runs on Redis + arq.")
def main() -> None:
    pass


# ---- processes ----


@main.command(help="Run a worker process (REDIS_URL, AGENTMILL_* settings).")
def worker() -> None:
    from worker.jobs import WorkerProcess

    settings = get_settings()
    proc = WorkerProcess(settings)
    logs.configure(json_lines=settings.log_json, level=settings.log_level, workerId=proc.worker_id)
    run_loop(proc.run())


@main.command(help="Run the HTTP API on AGENTMILL_API_HOST:AGENTMILL_API_PORT.")
def api() -> None:
    import uvicorn

    from producer.api.app import create_app
    from producer.api.serve import server_config

    settings = get_settings()
    logs.configure(json_lines=settings.log_json, level=settings.log_level, process="api")
    app = create_app(settings)
    # What start-up built (modules, pydantic schemas, routes) is never garbage: frozen, the
    # collector's full passes skip it instead of pausing a large batch request for 50-100 ms.
    gc.collect()
    gc.freeze()
    config = server_config(
        app,
        settings,
        host=settings.api_host,
        port=settings.api_port,
        loop="uvloop",
        log_level="warning",
        access_log=False,
    )
    uvicorn.Server(config).run()


# ---- readable events ----


def describe(e: RunEvent) -> str:
    p = e.payload
    k = e.kind.value
    if k == "status":
        s = p.get("status")
        if s == "retrying":
            return f"[yellow]↻ retrying[/] attempt {p.get('attempt')} in {p.get('delayMs', 0) / 1000:.1f} s ({p.get('reason')})"
        if s == "completed":
            return f"[green]✓ completed[/] after {p.get('iterations')} iterations"
        if s in ("failed", "aborted"):
            er = p.get("error") or {}
            return f"[red]✗ {s}[/] {er.get('code', '')}: {er.get('message', '')}"
        if s == "awaiting_human":
            calls = ", ".join(
                f"{c['name']}({c['arguments']}) [{c['toolCallId']}]" for c in p.get("pendingApprovals", [])
            )
            return f"[magenta]⏸ awaiting approval[/] {calls}"
        if s == "awaiting_tools":
            calls = ", ".join(
                f"{c['name']}({c['arguments']}) [{c['toolCallId']}]" for c in p.get("pendingToolCalls", [])
            )
            return f"[magenta]⏸ awaiting client tool results[/] {calls}"
        extra = {k2: v for k2, v in p.items() if k2 != "status"}
        return f"[cyan]● {s}[/] {orjson.dumps(extra).decode() if extra else ''}"
    if k == "model_delta":
        frag = p.get("text") or (p.get("toolCall") or {}).get("arguments", "")
        return f"[dim]… {frag!r}[/]"
    if k == "assistant_message":
        m = p.get("message", {})
        if m.get("toolCalls"):
            return "assistant → " + ", ".join(f"{c['name']}({c['arguments']})" for c in m["toolCalls"])
        return f"assistant: [bold]{m.get('content', '')}[/]"
    if k == "tool_call":
        where = " [client]" if p.get("execution") == "client" else ""
        return f"→ {p.get('name')}({p.get('arguments')}){where} [{p.get('toolCallId')}]"
    if k == "tool_result":
        color = "red" if p.get("isError") else "green"
        return f"[{color}]← {p.get('name')}:[/] {str(p.get('content', ''))[:200]}"
    if k == "error":
        where = p.get("name") or p.get("scope", "")
        return f"[red]! {p.get('code')}[/] ({where}) {str(p.get('message', ''))[:200]}"
    if k == "compaction":
        return f"⇊ compacted {p.get('removed')} messages ({p.get('reason')})"
    return f"{k}: {orjson.dumps(p).decode()[:200]}"


def print_event(e: RunEvent) -> None:
    console.print(f"[dim]{e.seq:>4}[/] {describe(e)}")


# ---- direct-Redis helpers ----


@contextlib.asynccontextmanager
async def _producer() -> AsyncIterator[Any]:
    from redis.asyncio import Redis

    from producer.service import Producer
    from shared.profiles import profiles_from
    from shared.redis_conn import connect

    settings = get_settings()
    redis: Redis = connect(settings, retries=3)
    try:
        yield Producer(redis, settings=settings, profiles=profiles_from(settings.profiles))
    finally:
        await redis.aclose()


async def _tail_redis(run_id: str, after: int) -> int:
    async with _producer() as p:
        if await p.get(run_id) is None:
            err.print(f"[red]error:[/] no run {run_id} (REDIS_URL={_safe_url(p.settings.redis_url)})")
            return 2
        last = after
        while True:
            page = await p.read_events(run_id, after=last, limit=500, block_ms=1000)
            for e in page:
                print_event(e)
                last = e.seq
                if e.terminal:
                    return 0 if e.payload.get("status") == "completed" else 1
            if not page:
                rec = await p.get(run_id)
                if rec is None or (rec.status.terminal and rec.last_seq <= last):
                    return 0 if rec is not None and rec.status.value == "completed" else 1


async def _tail_api(api: str, token: str | None, run_id: str, after: int) -> int:
    from producer.client import AsyncClient

    async with AsyncClient(api, token=token) as c:
        try:
            async for e in c.events(run_id, after=after):
                print_event(e)
                if e.terminal:
                    return 0 if e.payload.get("status") == "completed" else 1
        except ApiError as exc:
            err.print(f"[red]error:[/] {exc.message}")
            return 2
    return 1


def _safe_url(url: str) -> str:
    """The URL without its password, for messages."""
    if "@" in url:
        scheme, _, rest = url.partition("://")
        return f"{scheme}://***@{rest.split('@', 1)[1]}"
    return url


@main.command(help="Print a run's events as they arrive; exits after the terminal event.")
@click.argument("run_id")
@click.option("--after", type=int, default=0, help="resume after this seq")
@click.option("--api", "api_url", default=None, help="read through the HTTP API instead of Redis")
@click.option("--token", envvar="AGENTMILL_TOKEN", default=None)
def tail(run_id: str, after: int, api_url: str | None, token: str | None) -> None:
    _run(_tail_api(api_url, token, run_id, after) if api_url else _tail_redis(run_id, after))


@main.command(help="Show a run's status and result.")
@click.argument("run_id")
def status(run_id: str) -> None:
    async def go() -> int:
        async with _producer() as p:
            rec = await p.get(run_id)
            if rec is None:
                err.print(f"[red]error:[/] no run {run_id}")
                return 2
            console.print_json(orjson.dumps(rec.view()).decode())
            return 1 if rec.status.terminal and rec.status != RunStatus.COMPLETED else 0

    _run(go())


@main.command(help="Abort a run (a finished or unknown run is a clear no-op).")
@click.argument("run_id")
@click.option("--reason", default="aborted from the CLI")
def abort(run_id: str, reason: str) -> None:
    async def go() -> int:
        async with _producer() as p:
            verdict = await p.abort(run_id, reason=reason)
            console.print({"unknown": f"no run {run_id}", "finished": "already finished: nothing to do",
                           "aborted": "aborted", "requested": "abort requested; its worker stops it within a second"}[verdict])  # fmt: skip
            return 2 if verdict == "unknown" else 0

    _run(go())


def _decision(approved: bool) -> Any:
    @click.argument("run_id")
    @click.argument("tool_call_id")
    @click.option("--reason", default=None)
    def cmd(run_id: str, tool_call_id: str, reason: str | None) -> None:
        async def go() -> int:
            async with _producer() as p:
                verdict = await p.settle_approval(run_id, tool_call_id, approved=approved, reason=reason)
                ok = verdict in ("recorded", "resumed")
                (console if ok else err).print(f"{'✓' if ok else '✗'} {verdict}")
                return 0 if ok else 2

        _run(go())

    return cmd


main.command("approve", help="Approve a pending tool call.")(_decision(True))
main.command("reject", help="Reject a pending tool call.")(_decision(False))


@main.command(
    "tool-result", help="Post the result of a client tool call (a repeat of the same result is a no-op)."
)
@click.argument("run_id")
@click.argument("tool_call_id")
@click.option("--content", required=True, help="the result text ('-' reads it from stdin)")
@click.option("--error", "is_error", is_flag=True, help="the call failed: content is the error")
@click.option("--api", "api_url", default=None, help="post through the HTTP API instead of Redis")
@click.option("--token", envvar="AGENTMILL_TOKEN", default=None)
def tool_result(run_id: str, tool_call_id: str, content: str, is_error: bool, api_url: str | None,
                token: str | None) -> None:  # fmt: skip
    from shared.models import ClientToolResult

    text = sys.stdin.read() if content == "-" else content
    result = ClientToolResult(tool_call_id=tool_call_id, content=text, is_error=is_error)

    async def go() -> int:
        if api_url:
            from producer.client import AsyncClient

            async with AsyncClient(api_url, token=token) as c:
                try:
                    answer = await c.tool_results(run_id, [result])
                except ApiError as exc:
                    err.print(f"[red]✗ {exc.code}:[/] {exc.message}")
                    return 2
            console.print(f"✓ {answer.results[0].result}{' (run resumed)' if answer.resumed else ''}")
            return 0
        async with _producer() as p:
            verdict, call, each = await p.post_tool_results(run_id, [result])
            if verdict not in ("recorded", "resumed"):
                err.print(f"[red]✗ {verdict}[/] {call}")
                return 2
            console.print(f"✓ {each[0]}{' (run resumed)' if verdict == 'resumed' else ''}")
            return 0

    _run(go())


@main.command(help="Submit runs from a JSONL file (one RunInput per line) as one batch.")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--wait", is_flag=True, help="show the batch's progress until every run ends")
@click.option("--api", "api_url", default=None, help="submit through the HTTP API instead of Redis")
@click.option("--token", envvar="AGENTMILL_TOKEN", default=None)
def submit(file: Path, wait: bool, api_url: str | None, token: str | None) -> None:
    _run(_submit(file, wait, api_url, token))


async def _submit(file: Path, wait: bool, api_url: str | None, token: str | None) -> int:
    items: list[Any] = []
    bad = 0
    for n, line in enumerate((await asyncio.to_thread(file.read_text)).splitlines(), 1):
        if not line.strip():
            continue
        try:
            items.append(orjson.loads(line))
        except orjson.JSONDecodeError as exc:
            err.print(f"[red]line {n}:[/] not JSON: {exc}")
            bad += 1
    # A file may hold more runs than one batch request takes: it goes in parts of one batch, each
    # part placed by its offset, so the batch's progress counts every run of the file.
    from shared.ids import new_batch_id

    size = max(1, get_settings().max_batch)
    parts = [(start, items[start : start + size]) for start in range(0, len(items), size)]
    batch_id = new_batch_id()
    accepted: list[str] = []
    view: Any
    if api_url:
        from producer.client import AsyncClient

        async with AsyncClient(api_url, token=token) as c:
            for start, part in parts:
                answer = await c.create_batch(part, batch_id=batch_id, offset=start)
                for i, r in enumerate(answer.results, start):
                    if r.runId and r.error is None:
                        accepted.append(r.runId)
                    else:
                        err.print(f"[red]item {i}:[/] {r.error.message if r.error else 'not accepted'}")
                        bad += 1

            async def view() -> dict[str, Any] | None:
                return (await c.get_batch(batch_id)).model_dump()

            final = await _batch_progress(batch_id, view) if wait and accepted else None
    else:
        from producer.listing import Catalog
        from shared.quotas import DEFAULT_TENANT

        async with _producer() as p:
            for start, part in parts:
                for i, o in enumerate(await p.submit_many(part, batch_id=batch_id, offset=start), start):
                    if hasattr(o, "run_id"):
                        accepted.append(o.run_id)
                    else:
                        err.print(f"[red]item {i}:[/] {o.message}")
                        bad += 1

            async def view() -> dict[str, Any] | None:
                return await Catalog(p).batch(DEFAULT_TENANT, batch_id)

            final = await _batch_progress(batch_id, view) if wait and accepted else None
    console.print(f"batch {batch_id}: accepted {len(accepted)}, rejected {bad}")
    for rid in accepted:
        console.print(rid)
    not_completed = final is not None and final["counts"].get("completed", 0) < final["total"]
    return 1 if bad or not_completed else 0


def _counts_text(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} {s.replace('_', ' ')}" for s, n in counts.items() if n)


async def _batch_progress(batch_id: str, view: Any) -> dict[str, Any] | None:
    """A progress bar of the batch's ended runs (GET /v1/batches/{id}), until all have ended."""
    final: dict[str, Any] | None = None
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
    ) as bar:
        task = bar.add_task(f"batch {batch_id}", total=None)
        while True:
            final = await view()
            if final is None:  # expired meanwhile
                return None
            bar.update(
                task,
                total=final["total"],
                completed=final["done"],
                description=f"batch {batch_id} ({_counts_text(final['counts'])})",
            )
            if final["finished"]:
                return final
            await asyncio.sleep(0.2)


async def _view_of(client: AsyncClient, run_id: str) -> dict[str, Any]:
    """A run's view through the API client, as the JSON the API sent (what _progress reads)."""
    view = await client.get(run_id)
    return dict(view.model_dump(mode="json", by_alias=True, exclude_none=True))


async def _progress(run_ids: list[str], view: Any) -> dict[str, dict[str, Any]]:
    """A progress bar of accepted → completed; returns the final views."""
    views: dict[str, dict[str, Any]] = {}
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
    ) as bar:
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


# ---- finding runs and batches ----


def _reach(f: Any) -> Any:
    """--api/--token (through the HTTP API, the token's tenant) or --tenant (straight to Redis)."""
    f = click.option(
        "--tenant", default="default", show_default=True, help="tenant, when reading Redis directly"
    )(f)
    f = click.option("--token", envvar="AGENTMILL_TOKEN", default=None)(f)
    return click.option("--api", "api_url", default=None, help="go through the HTTP API instead of Redis")(f)


@main.group(help="Find runs: list and search by status, agent, session, batch, time and metadata.")
def runs() -> None:
    pass


@runs.command("ls", help="List runs, newest first (every filter narrows the list).")
@click.option(
    "--status",
    default=None,
    help="queued, running, awaiting_human, awaiting_tools, completed, failed, aborted",
)
@click.option("--agent", default=None)
@click.option("--session", "session_id", default=None)
@click.option("--batch", "batch_id", default=None)
@click.option("--meta", "metadata", multiple=True, help="key=value (repeatable)")
@click.option("--after", "created_after", type=int, default=None, help="created after (ms since the epoch)")
@click.option(
    "--before", "created_before", type=int, default=None, help="created before (ms since the epoch)"
)
@click.option("--limit", type=int, default=50, show_default=True, help="most rows to show")
@click.option("--json", "as_json", is_flag=True, help="one JSON object per line")
@_reach
def runs_ls(
    limit: int, as_json: bool, api_url: str | None, token: str | None, tenant: str, **flt: Any
) -> None:
    _run(_runs_ls(flt, limit, as_json, api_url, token, tenant))


async def _runs_ls(
    flt: dict[str, Any], limit: int, as_json: bool, api_url: str | None, token: str | None, tenant: str
) -> int:
    from producer.listing import Catalog, ListingError, RunFilter

    rows: list[dict[str, Any]] = []
    try:
        if api_url:
            from producer.client import AsyncClient

            meta = dict(t.partition("=")[::2] for t in flt.pop("metadata"))
            async with AsyncClient(api_url, token=token) as c:
                try:
                    async for summary in c.iter_runs(**flt, metadata=meta, limit=min(limit, 500)):
                        rows.append(summary.model_dump(exclude_none=True))
                        if len(rows) >= limit:
                            break
                except ApiError as exc:
                    err.print(f"[red]error:[/] {exc.message}")
                    return 2
        else:
            async with _producer() as p:
                cursor = None
                f = RunFilter(**{**flt, "metadata": tuple(flt["metadata"])})
                while len(rows) < limit:
                    page, cursor = await Catalog(p).list_runs(
                        tenant, f, limit=min(500, limit - len(rows)), cursor=cursor
                    )
                    rows += page
                    if cursor is None:
                        break
    except ListingError as exc:
        err.print(f"[red]error:[/] {exc}")
        return 2
    if as_json:
        for r in rows:
            console.print_json(orjson.dumps(r).decode(), indent=None)
        return 0
    table = Table("runId", "status", "created", "agent", "session", "batch", box=None)
    for r in rows:
        created = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(r["createdAt"] / 1000))
        table.add_row(
            r["runId"], r["status"], created, r.get("agent", ""), r.get("sessionId", ""), r.get("batchId", "")
        )
    console.print(table)
    console.print(f"{len(rows)} run(s)")
    return 0


@main.group(help="Follow and control batches (POST /v1/runs/batch, agentmill submit).")
def batch() -> None:
    pass


async def _batch_call(batch_id: str, api_url: str | None, token: str | None, tenant: str, abort: bool) -> int:
    if api_url:
        from producer.client import AsyncClient

        async with AsyncClient(api_url, token=token) as c:
            try:
                found: dict[str, Any] | None = (
                    (await c.abort_batch(batch_id)).model_dump()
                    if abort
                    else (await c.get_batch(batch_id)).model_dump()
                )
            except ApiError as exc:
                if exc.status != 404:
                    err.print(f"[red]error:[/] {exc.message}")
                    return 2
                found = None
    else:
        from producer.listing import Catalog

        async with _producer() as p:
            cat = Catalog(p)
            found = await cat.batch(tenant, batch_id)
            if found is not None and abort:
                verdicts = await cat.abort_batch(tenant, batch_id, "batch aborted from the CLI")
                found = {"batchId": batch_id, **verdicts}
    if found is None:
        err.print(f"[red]error:[/] no batch {batch_id}")
        return 2
    if abort:
        console.print(
            f"batch {batch_id}: {found['aborted']} aborted, {found['requested']} stopping (running), "
            f"{found['finished']} had ended"
        )
        return 0
    pct = f"{found['progress'] * 100:.0f}%"
    state = "finished" if found["finished"] else "in progress"
    console.print(f"batch {batch_id}: {state}, {found['done']}/{found['total']} ended ({pct})")
    console.print(f"  {_counts_text(found['counts']) or 'no runs'}")
    console.print_json(orjson.dumps(found).decode())
    return 0


@batch.command("status", help="A batch's counts by status and progress.")
@click.argument("batch_id")
@_reach
def batch_status(batch_id: str, api_url: str | None, token: str | None, tenant: str) -> None:
    _run(_batch_call(batch_id, api_url, token, tenant, abort=False))


@batch.command("abort", help="Abort every run of a batch that has not ended.")
@click.argument("batch_id")
@_reach
def batch_abort(batch_id: str, api_url: str | None, token: str | None, tenant: str) -> None:
    _run(_batch_call(batch_id, api_url, token, tenant, abort=True))


# ---- the demo ----


@main.command(help="The embedded demo: own Redis, API and worker; a batch of runs, shown as they finish.")
@click.option("--runs", type=int, default=24, show_default=True)
def demo(runs: int) -> None:
    _run(_demo(runs))


QUESTIONS = ["what is {a} * {b}?", "compute {a} + {b} * 2", "({a} - {b}) * 3 = ?", "what's {a} ** 2 - {b}?"]


async def _demo(n: int) -> int:
    import uvicorn

    from producer.api.app import create_app
    from producer.api.serve import server_config
    from producer.client import AsyncClient
    from shared.redis_server import RedisServer, RedisServerError, free_port
    from worker.jobs import WorkerProcess

    logs.configure(level="WARNING")
    t0 = time.monotonic()
    server = None
    url = os.environ.get("REDIS_URL")
    if url is None:
        try:
            server = RedisServer().start()
        except RedisServerError as exc:
            err.print(f"[red]error:[/] {exc}")
            return 2
        url = server.url
    settings = Settings(redis_url=url, auth_disabled=True, poll_delay_s=0.02, worker_metrics_port=-1)
    port = free_port()
    console.print(
        f"[bold]agentmill demo[/]: Redis {_safe_url(url)}{' (private)' if server else ''}, API http://127.0.0.1:{port}, one worker"
    )
    api = uvicorn.Server(
        server_config(
            create_app(settings), settings, host="127.0.0.1", port=port, log_level="error", access_log=False
        )
    )
    api_task = asyncio.create_task(api.serve())
    wp = WorkerProcess(settings)
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
            ids = [r.runId for r in results if r.runId]
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


if __name__ == "__main__":
    main()
