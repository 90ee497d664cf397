"""The commands about one run: ``tail``, ``status``, ``abort``, ``approve``, ``reject`` and
``tool-result``. Each reaches the run as its tenant knows it, through the HTTP API (``--api`` or
AGENTMILL_API_URL: the token's tenant) or straight to Redis (``--tenant``, resolved as the API
resolves it: producer.scope.Scope). With ``--json`` stdout holds the answer as the API sends it
(camelCase; ``tail --json``: one event a line); errors are one ``error:`` line on stderr, exit 2."""

from __future__ import annotations

import sys
from typing import Any

import click

from agentmill_client.codec import to_jsonable
from agentmill_client.errors import ApiError
from agentmill_client.models import RunEvent
from agentmill_client.statuses import RunStatus
from app.cli.common import (
    api_client,
    console,
    direct_producer,
    emit_json,
    exit_with,
    json_option,
    print_event,
    reach,
    say_error,
    wire,
)
from shared.actors import actor

__all__ = ["abort", "approve", "reject", "status", "tail", "tool_result"]

CLI = actor("cli")  # who the run's events name for a command straight to Redis (shared.actors)


def _refused(exc: ApiError) -> int:
    """An API refusal as one error line, exit code 2 (a refused token: exit_with says it)."""
    if exc.status in (401, 403):
        raise exc
    say_error(exc.message if exc.code == "unknown_run" else f"{exc.code}: {exc.message}")
    return 2


def _show_event(e: RunEvent, as_json: bool) -> None:
    if as_json:
        emit_json(to_jsonable(e))
    else:
        print_event(e)


def _ended(e: RunEvent) -> int:
    return 0 if e.payload.get("status") == "completed" else 1


async def _tail_redis(run_id: str, tenant: str, after: int, as_json: bool) -> int:
    async with direct_producer() as p:
        if (rec := await p.get(run_id, tenant=tenant)) is None:
            say_error(f"no run {run_id} for tenant {tenant}")
            return 2
        last = after
        while True:
            page = await p.read_events(
                rec.key, after=last, limit=500, block_ms=None if rec.archived else 1000, label=run_id,
                part=p.parts.layout.of_key(rec.stream_key), archived=rec.archived,
            )  # fmt: skip
            for e in page:
                _show_event(e, as_json)
                last = e.seq
                if e.terminal:
                    return _ended(e)
            if not page:
                now = await p.get(run_id, tenant=tenant)
                if now is None or (now.status.terminal and now.last_seq <= last):
                    return 0 if now is not None and now.status == RunStatus.COMPLETED else 1
                rec = now  # archived meanwhile: the rest from the archive


async def _tail_api(api: str, token: str | None, run_id: str, after: int, as_json: bool) -> int:
    async with api_client(api, token) as c:
        try:
            await c.get(run_id)  # an API never reached is an error at once, not a minute of reconnects
            async for e in c.events(run_id, after=after):
                _show_event(e, as_json)
                if e.terminal:
                    return _ended(e)
        except ApiError as exc:
            return _refused(exc)
    return 1


@click.command(help="Print a run's events as they arrive; exits after the terminal event.")
@click.argument("run_id")
@click.option("--after", type=int, default=0, help="resume after this seq")
@click.option("--json", "as_json", is_flag=True, help="each event as a JSON object, one a line (stdout)")
@reach
def tail(run_id: str, after: int, as_json: bool, api_url: str | None, token: str | None, tenant: str) -> None:
    exit_with(
        _tail_api(api_url, token, run_id, after, as_json)
        if api_url
        else _tail_redis(run_id, tenant, after, as_json)
    )


@click.command(
    help="Show a run's status and result (exit code 1 when it failed, was aborted or was superseded)."
)
@click.argument("run_id")
@json_option
@reach
def status(run_id: str, as_json: bool, api_url: str | None, token: str | None, tenant: str) -> None:
    async def go() -> int:
        if api_url:
            async with api_client(api_url, token) as c:
                try:
                    view = wire(await c.get(run_id))
                except ApiError as exc:
                    return _refused(exc)
        else:
            async with direct_producer() as p:
                if (rec := await p.get(run_id, tenant=tenant)) is None:
                    say_error(f"no run {run_id} for tenant {tenant}")
                    return 2
                view = rec.view()
                if kids := await p.children(rec):
                    view["children"] = kids
        if as_json:
            emit_json(view)
        else:
            console.print_json(data=view)
        ended = RunStatus(view["status"])
        return 1 if ended.terminal and ended != RunStatus.COMPLETED else 0

    exit_with(go())


_ABORTED = {
    "finished": "already finished: nothing to do",
    "aborted": "aborted",
    "requested": "abort requested; its worker stops it within a second",
}


@click.command(
    help="Abort a run. A run that already finished is a no-op (exit code 0); "
    "an unknown run is an error (exit code 2)."
)
@click.argument("run_id")
@click.option("--reason", default="aborted from the CLI", help="the reason recorded (straight to Redis only)")
@json_option
@reach
def abort(
    run_id: str, reason: str, as_json: bool, api_url: str | None, token: str | None, tenant: str
) -> None:
    async def go() -> int:
        if api_url:
            async with api_client(api_url, token) as c:
                try:
                    verdict = (await c.abort(run_id)).result
                except ApiError as exc:
                    return _refused(exc)
        else:
            async with direct_producer() as p:
                verdict = await p.abort(
                    await p.resolve(run_id, tenant), reason=reason, tenant=tenant, actor=CLI
                )
                if verdict == "unknown" and await p.get(run_id, tenant=tenant) is not None:
                    verdict = "finished"  # archived: gone from Redis
            if verdict == "unknown":
                say_error(f"no run {run_id} for tenant {tenant}")
                return 2
        if as_json:
            emit_json({"runId": run_id, "result": verdict})
        else:
            console.print(_ABORTED.get(verdict, verdict))
        return 0

    exit_with(go())


def _approval_refusal(verdict: str, run_id: str, call_id: str) -> str:
    """What a settle_approval verdict that decided nothing means (the API's words for it)."""
    return {
        "unknown_run": f"no run {run_id}",
        "unknown_call": f"unknown_tool_call: run {run_id} has no pending tool call {call_id}",
        "already_decided": f"already_decided: tool call {call_id} was already decided",
        "not_awaiting": f"not_awaiting_approval: run {run_id} is not waiting for approval",
    }.get(verdict, verdict)


def _decision(approved: bool) -> Any:
    @click.argument("run_id")
    @click.argument("tool_call_id")
    @click.option("--reason", default=None)
    @json_option
    @reach
    def cmd(run_id: str, tool_call_id: str, reason: str | None, as_json: bool, api_url: str | None,
            token: str | None, tenant: str) -> None:  # fmt: skip
        async def go() -> int:
            if api_url:
                async with api_client(api_url, token) as c:
                    decide = c.approve if approved else c.reject
                    try:
                        answer = wire(await decide(run_id, tool_call_id, reason=reason))
                    except ApiError as exc:
                        return _refused(exc)
            else:
                async with direct_producer() as p:
                    key = await p.resolve(run_id, tenant)
                    verdict = await p.settle_approval(
                        key, tool_call_id, approved=approved, reason=reason, tenant=tenant, actor=CLI
                    )
                if verdict not in ("recorded", "resumed"):
                    say_error(_approval_refusal(verdict, run_id, tool_call_id))
                    return 2
                answer = {"runId": run_id, "results": [{"toolCallId": tool_call_id, "result": verdict}],
                          "resumed": verdict == "resumed"}  # fmt: skip
            if as_json:
                emit_json(answer)
            else:
                console.print(f"✓ {answer['results'][0]['result']}")
            return 0

        exit_with(go())

    return cmd


approve = click.command("approve", help="Approve a pending tool call.")(_decision(True))
reject = click.command("reject", help="Reject a pending tool call.")(_decision(False))


_TOOL_REFUSALS = {
    "unknown_run": "no run {run}",
    "unknown_call": "unknown_tool_call: run {run} has no tool call {call}",
    "not_client": "not_client_tool: tool call {call} is not a client tool call: its worker executes it",
    "finished": "run_finished: run {run} has already finished",
    "conflict": "conflict: tool call {call} already has a different result",
    "timed_out": "timed_out: tool call {call} passed its deadline; the model was given a timeout error",
}


@click.command(
    "tool-result", help="Post the result of a client tool call (a repeat of the same result is a no-op)."
)
@click.argument("run_id")
@click.argument("tool_call_id")
@click.option("--content", required=True, help="the result text ('-' reads it from stdin)")
@click.option("--error", "is_error", is_flag=True, help="the call failed: content is the error")
@json_option
@reach
def tool_result(run_id: str, tool_call_id: str, content: str, is_error: bool, as_json: bool,
                api_url: str | None, token: str | None, tenant: str) -> None:  # fmt: skip
    from agentmill_client.models import ClientToolResult

    text = sys.stdin.read() if content == "-" else content
    result = ClientToolResult(tool_call_id=tool_call_id, content=text, is_error=is_error)

    async def go() -> int:
        if api_url:
            async with api_client(api_url, token) as c:
                try:
                    answer = wire(await c.tool_results(run_id, [result]))
                except ApiError as exc:
                    return _refused(exc)
        else:
            async with direct_producer() as p:
                key = await p.resolve(run_id, tenant)
                verdict, call, each = await p.post_tool_results(key, [result], tenant=tenant, actor=CLI)
            if verdict not in ("recorded", "resumed"):
                said = _TOOL_REFUSALS.get(verdict, verdict + ": {call}")
                say_error(said.format(run=run_id, call=call or tool_call_id))
                return 2
            answer = {"runId": run_id, "results": [{"toolCallId": tool_call_id, "result": each[0]}],
                      "resumed": verdict == "resumed"}  # fmt: skip
        if as_json:
            emit_json(answer)
        else:
            console.print(
                f"✓ {answer['results'][0]['result']}{' (run resumed)' if answer['resumed'] else ''}"
            )
        return 0

    exit_with(go())
