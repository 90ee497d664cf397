"""``agentmill schedule create|list|get|delete|pause|resume``: a tenant's cron schedules, through the
HTTP API (``--api``) or straight to Redis (``--tenant``), as producer.schedules keeps them. stdout
holds a line a schedule, or with ``--json`` the API's answer (``list --json``: one schedule a line)."""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click
import orjson
from pydantic import ValidationError

from agentmill_client.errors import ApiError
from agentmill_client.schedules import MAX_CATCHUP, Overlap, ScheduleInput, ScheduleView
from app.cli.common import (
    console,
    either_way,
    emit_json,
    exit_with,
    json_option,
    reach,
    say_error,
    wire,
)
from shared.calls.schedules import SchedulePauseVerdict

__all__ = ["schedule"]


@click.group(help="Cron schedules: each firing makes one run (POST /v1/schedules).")
def schedule() -> None:
    pass


def _when(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _line(v: ScheduleView) -> str:
    state = "paused" if v.paused else f"next {_when(v.next_fire_times[0])}" if v.next_fire_times else ""
    return f"{v.schedule_id}  {v.cron!r} {v.timezone}  {state}  fired {v.fired}, skipped {v.skipped}"


Call = Callable[[Any], Awaitable[Any]]


async def _call(
    api_url: str | None, token: str | None, tenant: str, as_json: bool, via_api: Call, via_redis: Call
) -> int:
    """One call through the API client or a ScheduleStore (with ``tenant``); prints the answer."""

    async def direct(p: Any) -> Any:
        from producer.schedules.store import ScheduleStore

        return await via_redis((ScheduleStore(p), tenant))

    answer, code = await either_way(api_url, token, via_api, direct)
    if code:
        return code
    if answer is None:
        say_error("no such schedule")
        return 2
    (_emit if as_json else _show)(answer)
    return 0


def _show(answer: Any) -> None:
    if isinstance(answer, list):
        for v in answer:
            console.print(_line(v), soft_wrap=True, highlight=False, markup=False)
        return
    if isinstance(answer, ScheduleView):
        console.print(_line(answer), soft_wrap=True, highlight=False, markup=False)
        for t in answer.next_fire_times:
            console.print(f"  next: {_when(t)}")
        return
    console.print(answer)


def _emit(answer: Any) -> None:
    """--json: a schedule as the API sends it; a list one schedule a line; a verdict {result}."""
    if isinstance(answer, list):
        for v in answer:
            emit_json(wire(v))
    elif isinstance(answer, ScheduleView):
        emit_json(wire(answer))
    else:
        emit_json({"result": answer})


def _store_error(exc: Exception) -> ApiError:
    from producer.submission import SubmissionError

    if isinstance(exc, SubmissionError):
        return ApiError(exc.status, exc.code, exc.message)
    raise exc


@schedule.command(
    "create", help="Create a schedule; INPUT is a RunInput template (a JSON file, '-' for stdin)."
)
@click.argument("input_file", metavar="INPUT")
@click.option("--cron", required=True, help="five fields, or six with seconds first ('*/10 * * * * *')")
@click.option("--id", "schedule_id", default=None, help="the schedule's id (generated when absent)")
@click.option("--timezone", default="UTC", show_default=True, help="IANA time zone of the cron")
@click.option("--overlap", type=click.Choice([o.value for o in Overlap]), default="skip", show_default=True,
              help="while the previous run is active: skip the firing, enqueue anyway, or cancel_previous")  # fmt: skip
@click.option("--catchup", type=click.IntRange(1, MAX_CATCHUP), default=10, show_default=True,
              help="after an outage, the latest missed firings made at most")  # fmt: skip
@json_option
@reach
def create(input_file: str, cron: str, schedule_id: str | None, timezone: str, overlap: str, catchup: int,
           as_json: bool, api_url: str | None, token: str | None, tenant: str) -> None:  # fmt: skip
    raw = sys.stdin.buffer.read() if input_file == "-" else Path(input_file).read_bytes()
    try:
        body = ScheduleInput(schedule_id=schedule_id, cron=cron, timezone=timezone, input=orjson.loads(raw),
                             overlap=Overlap(overlap), catchup=catchup)  # fmt: skip
    except (ValidationError, orjson.JSONDecodeError) as exc:
        say_error(" ".join(str(exc).split()))
        sys.exit(2)

    async def via_redis(a: tuple[Any, str]) -> Any:
        from agentmill_client.ids import new_run_id

        store, t = a
        try:
            return (await store.create(body, t, schedule_id or "sch_" + new_run_id()[4:]))[0]
        except Exception as exc:
            raise _store_error(exc) from None

    exit_with(_call(api_url, token, tenant, as_json, lambda c: c.create_schedule(body), via_redis))


@schedule.command("list", help="The tenant's schedules, oldest first.")
@click.option("--limit", type=click.IntRange(1, 1000), default=100, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="one schedule a line as JSON (stdout), nothing else")
@reach
def ls(limit: int, as_json: bool, api_url: str | None, token: str | None, tenant: str) -> None:
    async def via_api(c: Any) -> Any:
        return (await c.list_schedules(limit=limit)).schedules

    async def via_redis(a: tuple[Any, str]) -> Any:
        return (await a[0].list(a[1], limit))[0]

    exit_with(_call(api_url, token, tenant, as_json, via_api, via_redis))


@schedule.command("get", help="A schedule and its next firing times.")
@click.argument("schedule_id")
@click.option("--next", "shown", type=click.IntRange(0, 100), default=5, show_default=True)
@json_option
@reach
def get(
    schedule_id: str, shown: int, as_json: bool, api_url: str | None, token: str | None, tenant: str
) -> None:
    exit_with(_call(api_url, token, tenant, as_json, lambda c: c.get_schedule(schedule_id, next=shown),
                    lambda a: a[0].get(schedule_id, a[1], shown)))  # fmt: skip


def _control(verb: str) -> Any:
    @click.argument("schedule_id")
    @json_option
    @reach
    def cmd(schedule_id: str, as_json: bool, api_url: str | None, token: str | None, tenant: str) -> None:
        async def via_api(c: Any) -> Any:
            return (await getattr(c, f"{verb}_schedule")(schedule_id)).result

        async def via_redis(a: tuple[Any, str]) -> Any:
            store, t = a
            if verb == "delete":
                return "deleted" if await store.delete(schedule_id, t) else None
            verdict = await store.pause(schedule_id, t, verb == "pause")
            return None if verdict is SchedulePauseVerdict.UNKNOWN else verdict

        exit_with(_call(api_url, token, tenant, as_json, via_api, via_redis))

    return cmd


for _verb, _help in (
    ("delete", "Delete a schedule (the runs it made stay)."),
    ("pause", "Pause a schedule: no firing until it is resumed."),
    ("resume", "Resume a schedule from its next firing after now."),
):
    schedule.command(_verb, help=_help)(_control(_verb))
