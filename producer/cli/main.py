"""The ``agentmill`` command. click for the command tree (arq already depends on it); rich for the
progress bars and readable event lines.

Most commands talk to Redis directly (REDIS_URL); ``--api URL`` makes submit and tail go through
the HTTP API instead. This module holds the group and the commands about one run; batches and
listings are in producer.cli.batches, schedules in producer.cli.schedules, the processes and the demo in producer.cli.demo.
"""

from __future__ import annotations

import sys
from typing import Any

import click
import orjson

from agentmill_client.errors import ApiError
from agentmill_client.statuses import RunStatus
from producer.cli import archiver, batches, demo, lineage, schedules, submit
from producer.cli.common import api_client, console, direct_producer, err, exit_with, print_event, safe_url

__all__ = ["main"]


@click.group(help="agentmill: a durable worker pool for LLM agent runs on Redis + arq.")
def main() -> None:
    pass


async def _tail_redis(run_id: str, after: int) -> int:
    async with direct_producer() as p:
        if (rec := await p.get(run_id)) is None:
            err.print(f"[red]error:[/] no run {run_id} (REDIS_URL={safe_url(p.settings.redis_url)})")
            return 2
        last = after
        while True:
            page = await p.read_events(
                run_id, after=last, limit=500, block_ms=None if rec.archived else 1000, archived=rec.archived
            )
            for e in page:
                print_event(e)
                last = e.seq
                if e.terminal:
                    return 0 if e.payload.get("status") == "completed" else 1
            if not page:
                if (now := await p.get(run_id)) is None or (now.status.terminal and now.last_seq <= last):
                    return 0 if now is not None and now.status.value == "completed" else 1
                rec = now  # archived meanwhile: the rest from the archive


async def _tail_api(api: str, token: str | None, run_id: str, after: int) -> int:
    async with api_client(api, token) as c:
        try:
            await c.get(run_id)  # an API never reached is an error at once, not a minute of reconnects
            async for e in c.events(run_id, after=after):
                print_event(e)
                if e.terminal:
                    return 0 if e.payload.get("status") == "completed" else 1
        except ApiError as exc:
            if exc.status in (401, 403):
                raise  # exit_with says it: a refused token
            err.print(f"[red]error:[/] {exc.message}")
            return 2
    return 1


@main.command(help="Print a run's events as they arrive; exits after the terminal event.")
@click.argument("run_id")
@click.option("--after", type=int, default=0, help="resume after this seq")
@click.option("--api", "api_url", default=None, help="read through the HTTP API instead of Redis")
@click.option("--token", default=None, help="bearer token with --api (default: AGENTMILL_TOKEN)")
def tail(run_id: str, after: int, api_url: str | None, token: str | None) -> None:
    exit_with(_tail_api(api_url, token, run_id, after) if api_url else _tail_redis(run_id, after))


@main.command(help="Show a run's status and result.")
@click.argument("run_id")
def status(run_id: str) -> None:
    async def go() -> int:
        async with direct_producer() as p:
            rec = await p.get(run_id)
            if rec is None:
                err.print(f"[red]error:[/] no run {run_id}")
                return 2
            console.print_json(orjson.dumps(rec.view()).decode())
            return 1 if rec.status.terminal and rec.status != RunStatus.COMPLETED else 0

    exit_with(go())


@main.command(help="Abort a run (a finished or unknown run is a clear no-op).")
@click.argument("run_id")
@click.option("--reason", default="aborted from the CLI")
def abort(run_id: str, reason: str) -> None:
    async def go() -> int:
        async with direct_producer() as p:
            verdict = await p.abort(run_id, reason=reason)
            console.print({"unknown": f"no run {run_id}", "finished": "already finished: nothing to do",
                           "aborted": "aborted", "requested": "abort requested; its worker stops it within a second"}[verdict])  # fmt: skip
            return 2 if verdict == "unknown" else 0

    exit_with(go())


def _decision(approved: bool) -> Any:
    @click.argument("run_id")
    @click.argument("tool_call_id")
    @click.option("--reason", default=None)
    def cmd(run_id: str, tool_call_id: str, reason: str | None) -> None:
        async def go() -> int:
            async with direct_producer() as p:
                verdict = await p.settle_approval(run_id, tool_call_id, approved=approved, reason=reason)
                ok = verdict in ("recorded", "resumed")
                (console if ok else err).print(f"{'✓' if ok else '✗'} {verdict}")
                return 0 if ok else 2

        exit_with(go())

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
@click.option("--token", default=None, help="bearer token with --api (default: AGENTMILL_TOKEN)")
def tool_result(run_id: str, tool_call_id: str, content: str, is_error: bool, api_url: str | None,
                token: str | None) -> None:  # fmt: skip
    from agentmill_client.models import ClientToolResult

    text = sys.stdin.read() if content == "-" else content
    result = ClientToolResult(tool_call_id=tool_call_id, content=text, is_error=is_error)

    async def go() -> int:
        if api_url:
            async with api_client(api_url, token) as c:
                try:
                    answer = await c.tool_results(run_id, [result])
                except ApiError as exc:
                    err.print(f"[red]✗ {exc.code}:[/] {exc.message}")
                    return 2
            console.print(f"✓ {answer.results[0].result}{' (run resumed)' if answer.resumed else ''}")
            return 0
        async with direct_producer() as p:
            verdict, call, each = await p.post_tool_results(run_id, [result])
            if verdict not in ("recorded", "resumed"):
                err.print(f"[red]✗ {verdict}[/] {call}")
                return 2
            console.print(f"✓ {each[0]}{' (run resumed)' if verdict == 'resumed' else ''}")
            return 0

    exit_with(go())


for command in (
    demo.worker,
    demo.api,
    demo.demo,
    submit.submit,
    batches.runs,
    batches.batch,
    schedules.schedule,
    lineage.retry,
    lineage.fork,
    archiver.archiver,
):
    main.add_command(command)
batches.batch.add_command(lineage.retry_batch)
