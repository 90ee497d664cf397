"""``agentmill runs ls`` and ``batch status|abort``: finding runs, and following batches
(``agentmill submit`` is in app.cli.submit)."""

from __future__ import annotations

import sys
import time
from typing import Any

import click
import httpx
from redis.exceptions import RedisError
from rich.console import Console
from rich.table import Table

from agentmill_client.api import BatchView
from agentmill_client.errors import ApiError
from app.cli.common import (
    api_client,
    console,
    counts_text,
    direct_producer,
    emit_json,
    err,
    exit_with,
    json_option,
    reach,
    say_error,
    wire,
)

__all__ = ["batch", "runs"]


@click.group(help="Find runs: list and search by status, agent, session, batch, time and metadata.")
def runs() -> None:
    pass


@runs.command("ls", help="List runs, newest first (every filter narrows the list).")
@click.option(
    "--status",
    default=None,
    help="queued, running, awaiting_human, awaiting_tools, completed, failed, aborted, superseded",
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
@click.option("--json", "as_json", is_flag=True, help="one JSON object a line (stdout), nothing else")
@reach
def runs_ls(
    limit: int, as_json: bool, api_url: str | None, token: str | None, tenant: str, **flt: Any
) -> None:
    exit_with(_runs_ls(flt, limit, as_json, api_url, token, tenant))


async def _runs_ls(
    flt: dict[str, Any], limit: int, as_json: bool, api_url: str | None, token: str | None, tenant: str
) -> int:
    from producer.listing import Catalog, ListingError, RunFilter

    rows: list[dict[str, Any]] = []
    try:
        if api_url:
            meta = dict(t.partition("=")[::2] for t in flt.pop("metadata"))
            async with api_client(api_url, token) as c:
                try:
                    async for summary in c.iter_runs(**flt, metadata=meta, limit=min(limit, 500)):
                        rows.append(summary.model_dump(mode="json", by_alias=True, exclude_none=True))
                        if len(rows) >= limit:
                            break
                except ApiError as exc:
                    if exc.status in (401, 403):
                        raise  # exit_with says it: a refused token
                    say_error(exc.message)
                    return 2
        else:
            async with direct_producer() as p:
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
        say_error(str(exc))
        return 2
    if as_json:
        for r in rows:
            emit_json(r)
        return 0
    columns = ("runId", "status", "created", "agent", "session", "batch")
    lines = [
        (r["runId"], r["status"], time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(r["createdAt"] / 1000)),
         r.get("agent", ""), r.get("sessionId", ""), r.get("batchId", ""))
        for r in rows
    ]  # fmt: skip
    if not console.is_terminal:  # piped: tab-separated, nothing cut, whatever the width
        for line in (columns, *lines):
            console.print("\t".join(line), soft_wrap=True, markup=False)
    else:  # a terminal: a table as wide as the longest id needs, however narrow the terminal
        longest = max((len(line[0]) for line in lines), default=len("runId"))
        table = Table(box=None)
        for name in columns:
            table.add_column(
                name, no_wrap=name == "runId", min_width=longest if name == "runId" else len(name)
            )
        for line in lines:
            table.add_row(*line)
        width = max(console.width, longest + 60)  # the other columns' room; the terminal wraps past it
        Console(file=console.file, width=width, force_terminal=True, highlight=False).print(table)
    console.print(f"{len(rows)} run(s)")
    return 0


@click.group(help="Follow and control batches (POST /v1/runs/batch, agentmill submit).")
def batch() -> None:
    pass


async def _batch_call(
    batch_id: str, api_url: str | None, token: str | None, tenant: str, abort: bool, as_json: bool
) -> int:
    if api_url:
        async with api_client(api_url, token) as c:
            try:
                found: dict[str, Any] | None = wire(
                    await c.abort_batch(batch_id) if abort else await c.get_batch(batch_id)
                )
            except ApiError as exc:
                if exc.status in (401, 403):
                    raise  # exit_with says it: a refused token
                if exc.status != 404:
                    say_error(exc.message)
                    return 2
                found = None
    else:
        from producer.listing import Catalog

        async with direct_producer() as p:
            cat = Catalog(p)
            found = await cat.batch(tenant, batch_id)
            if found is not None:  # the API's answer, field for field (its model fills what it defaults)
                found = wire(BatchView.model_validate(found))
            if found is not None and abort:
                verdicts = await cat.abort_batch(tenant, batch_id, "batch aborted from the CLI")
                found = {"batchId": batch_id, **verdicts}
    if found is None:
        say_error(f"no batch {batch_id}")
        return 2
    if as_json:
        emit_json(found)
        return 0
    if abort:
        console.print(
            f"batch {batch_id}: {found['aborted']} aborted, {found['requested']} stopping (running), "
            f"{found['finished']} had ended"
        )
        return 0
    pct = f"{found['progress'] * 100:.0f}%"
    state = "finished" if found["finished"] else "in progress"
    console.print(f"batch {batch_id}: {state}, {found['done']}/{found['total']} ended ({pct})")
    console.print(f"  {counts_text(found['counts']) or 'no runs'}")
    return 0


@batch.command("status", help="A batch's counts by status and progress.")
@click.argument("batch_id")
@json_option
@reach
def batch_status(batch_id: str, as_json: bool, api_url: str | None, token: str | None, tenant: str) -> None:
    exit_with(_batch_call(batch_id, api_url, token, tenant, abort=False, as_json=as_json))


@batch.command("abort", help="Abort every run of a batch that has not ended.")
@click.argument("batch_id")
@json_option
@reach
def batch_abort(batch_id: str, as_json: bool, api_url: str | None, token: str | None, tenant: str) -> None:
    exit_with(_batch_call(batch_id, api_url, token, tenant, abort=True, as_json=as_json))


@batch.command("results", help="A batch's runs with their results as JSON lines, in item order (stdout).")
@click.argument("batch_id")
@click.option("--status", default=None, help="keep these statuses only (a comma list, e.g. failed,aborted)")
@reach
def batch_results(
    batch_id: str, status: str | None, api_url: str | None, token: str | None, tenant: str
) -> None:
    exit_with(_batch_results(batch_id, status, api_url, token, tenant))


async def _batch_results(
    batch_id: str, status: str | None, api_url: str | None, token: str | None, tenant: str
) -> int:
    """Lines to stdout as they arrive (nothing else goes there); errors and the count to stderr."""
    out = sys.stdout.buffer
    n = 0
    try:
        if api_url:
            async with api_client(api_url, token) as c:
                async for line in c.batch_results(batch_id, status=status):
                    out.write(line.model_dump_json(by_alias=True, exclude_none=True).encode() + b"\n")
                    n += 1
        else:
            from producer.batch_results import export, parse_statuses
            from producer.listing import Catalog

            wanted = parse_statuses(status)
            async with direct_producer() as p:
                if await Catalog(p).batch(tenant, batch_id) is None:
                    raise ApiError(404, "unknown_batch", f"no batch {batch_id}")
                async for chunk in export(p, tenant, batch_id, wanted):
                    out.write(chunk)
                    n += chunk.count(b"\n")
    except (ApiError, ValueError) as exc:
        if isinstance(exc, ApiError) and exc.status in (401, 403):
            raise  # exit_with says it: a refused token
        say_error(str(getattr(exc, "message", exc)))
        return 2
    except (httpx.HTTPError, RedisError) as exc:  # the connection broke off mid-way
        say_error(f"the results stopped after {n} run(s): {type(exc).__name__}: {exc}")
        return 1
    finally:
        out.flush()
    err.print(f"batch {batch_id}: {n} run(s)")
    return 0
