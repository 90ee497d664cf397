"""``agentmill retry RUN``, ``agentmill fork RUN --at-seq N`` and ``agentmill batch retry``: new runs
that continue a run that ended (producer/restore.py), straight on Redis or with ``--api`` through
the HTTP API. stdout is the new run's id (one per line for a batch), or with ``--json`` the API's
answer; errors go to stderr."""

from __future__ import annotations

from typing import Any

import click
from rich.markup import escape

from agentmill_client.errors import ApiError
from app.cli.common import (
    api_client,
    console,
    direct_producer,
    emit_json,
    err,
    exit_with,
    json_option,
    reach,
    say_error,
    wire,
)

__all__ = ["fork", "retry", "retry_batch"]


async def _one(
    api_url: str | None, token: str | None, tenant: str, as_json: bool, call: Any, direct: Any
) -> int:
    """The new run's id on stdout (``--json``: {runId, status}); a refusal (``code: message``) on
    stderr and exit code 2."""
    from app.forks import state_of
    from producer.restore import Restorer
    from producer.submission import SubmissionError

    try:
        if api_url:
            async with api_client(api_url, token) as c:
                got = wire(await call(c))
            answer = {"runId": got["runId"], "status": got["status"]}
        else:
            async with direct_producer() as p:
                new = await direct(Restorer(p, state_of), tenant)
            answer = {"runId": new.run_id, "status": new.status}
    except (ApiError, SubmissionError) as exc:
        if isinstance(exc, ApiError) and exc.status in (401, 403):
            raise  # exit_with says it: a refused token
        say_error(f"{exc.code}: {exc.message}")
        return 2
    if as_json:
        emit_json(answer)
    else:
        console.print(answer["runId"], highlight=False, soft_wrap=True)
    return 0


@click.command(help="Retry a failed or aborted run from its last checkpoint (recorded tool results reused).")
@click.argument("run_id")
@click.option("--from-start", is_flag=True, help="a fresh run of the same input instead")
@json_option
@reach
def retry(run_id: str, from_start: bool, as_json: bool, api_url: str | None, token: str | None,
          tenant: str) -> None:  # fmt: skip
    exit_with(
        _one(
            api_url, token, tenant, as_json,
            lambda c: c.retry(run_id, from_start=from_start),
            lambda r, t: r.retry(run_id, t, from_start=from_start),
        )
    )  # fmt: skip


@click.command(help="A new run from the state at event seq N of a run that ended.")
@click.argument("run_id")
@click.option("--at-seq", "at_seq", type=int, required=True, help="the seq of the event to start from")
@click.option("--message", "messages", multiple=True, help="a user message to append (repeatable)")
@json_option
@reach
def fork(run_id: str, at_seq: int, messages: tuple[str, ...], as_json: bool, api_url: str | None,
         token: str | None, tenant: str) -> None:  # fmt: skip
    from agentmill_client.models import Message

    msgs = [Message(role="user", content=m) for m in messages]
    exit_with(
        _one(
            api_url, token, tenant, as_json,
            lambda c: c.fork(run_id, at_seq, msgs),
            lambda r, t: r.fork(run_id, t, at_seq, msgs),
        )
    )  # fmt: skip


@click.command("retry", help="Retry a batch's failed runs, each in its place in the batch.")
@click.argument("batch_id")
@click.option(
    "--status", default="failed", show_default=True, help="failed, aborted, or both: failed,aborted"
)
@click.option(
    "--json", "as_json", is_flag=True, help="each run as {runId, retryRunId, error}, one a line (stdout)"
)
@reach
def retry_batch(batch_id: str, status: str, as_json: bool, api_url: str | None, token: str | None,
                tenant: str) -> None:  # fmt: skip
    async def go() -> int:
        from app.forks import state_of
        from producer.restore import Restorer

        wanted = tuple(s.strip() for s in status.split(","))
        if api_url:
            async with api_client(api_url, token) as c:
                try:
                    answer = await c.retry_batch(batch_id, status=status)
                except ApiError as exc:
                    if exc.status in (401, 403):
                        raise  # exit_with says it: a refused token
                    say_error(f"{exc.code}: {exc.message}")
                    return 2
            pairs = [(i.run_id, i.retry_run_id, i.error.message if i.error else "") for i in answer.results]
        else:
            async with direct_producer() as p:
                done = await Restorer(p, state_of).retry_batch(batch_id, tenant, wanted)
            pairs = [(o, getattr(g, "run_id", None), getattr(g, "message", "")) for o, g in done]
        for original, new, why in pairs:
            if as_json:
                emit_json({"runId": original, "retryRunId": new, "error": why or None})
            elif new:
                console.print(new, highlight=False, soft_wrap=True)
            else:
                err.print(f"[red]✗[/] {escape(f'{original}: {why}')}")
        err.print(f"{sum(1 for _, n, _ in pairs if n)} of {len(pairs)} runs retried")
        return 0 if all(n for _, n, _ in pairs) else 1

    exit_with(go())
