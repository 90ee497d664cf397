"""``agentmill submit``, ``runs ls`` and ``batch status|abort``: runs by the batch, and finding runs."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import Any

import click
import httpx
import orjson
from redis.exceptions import RedisError
from rich.table import Table

from producer.cli.common import console, direct_producer, err, exit_with, progress_bar, reach
from shared.errors import ApiError
from shared.settings import get_settings

__all__ = ["batch", "runs", "submit"]


@click.command(help="Submit runs from a JSONL file (one RunInput per line) as one batch.")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--wait", is_flag=True, help="show the batch's progress until every run ends")
@click.option("--api", "api_url", default=None, help="submit through the HTTP API instead of Redis")
@click.option("--token", envvar="AGENTMILL_TOKEN", default=None)
def submit(file: Path, wait: bool, api_url: str | None, token: str | None) -> None:
    exit_with(_submit(file, wait, api_url, token))


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
    # part placed by its offset, so the batch's progress counts every run of the file; every part
    # but the last says more follow, so the batch cannot finish (nor fire its webhook) early.
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
                more = start + len(part) < len(items)
                answer = await c.create_batch(part, batch_id=batch_id, offset=start, more=more)
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

        async with direct_producer() as p:
            for start, part in parts:
                more = start + len(part) < len(items)
                got = await p.submit_many(part, batch_id=batch_id, offset=start, more=more)
                for i, o in enumerate(got, start):
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
    with progress_bar() as bar:
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


@click.group(help="Find runs: list and search by status, agent, session, batch, time and metadata.")
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


@click.group(help="Follow and control batches (POST /v1/runs/batch, agentmill submit).")
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

        async with direct_producer() as p:
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
@reach
def batch_status(batch_id: str, api_url: str | None, token: str | None, tenant: str) -> None:
    exit_with(_batch_call(batch_id, api_url, token, tenant, abort=False))


@batch.command("abort", help="Abort every run of a batch that has not ended.")
@click.argument("batch_id")
@reach
def batch_abort(batch_id: str, api_url: str | None, token: str | None, tenant: str) -> None:
    exit_with(_batch_call(batch_id, api_url, token, tenant, abort=True))


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
            from producer.client import AsyncClient

            async with AsyncClient(api_url, token=token) as c:
                async for line in c.batch_results(batch_id, status=status):
                    out.write(line.model_dump_json(exclude_none=True).encode() + b"\n")
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
        err.print(f"[red]error:[/] {getattr(exc, 'message', exc)}")
        return 2
    except (httpx.HTTPError, RedisError) as exc:  # the connection broke off mid-way
        err.print(f"[red]error:[/] the results stopped after {n} run(s): {type(exc).__name__}: {exc}")
        return 1
    finally:
        out.flush()
    err.print(f"batch {batch_id}: {n} run(s)")
    return 0
