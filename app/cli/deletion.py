"""``agentmill runs delete``, ``sessions delete`` and ``deletions create|status``: deleting a run
with everything derived from it, a session's runs, and every run whose metadata matches (a job the
workers run; docs/operations.md#deletion). Straight to Redis (and the archive, when
AGENTMILL_ARCHIVE_URL is set), or through the API with ``--api``."""

from __future__ import annotations

import asyncio
from typing import Any

import click

from agentmill_client.errors import ApiError
from app.cli.common import (
    api_client,
    console,
    direct_producer,
    emit_json,
    exit_with,
    json_option,
    reach,
    say_error,
)
from producer.deletion import Eraser, ParentRunningError
from producer.deletion_jobs import DeletionJobs

__all__ = ["deletions", "run_delete", "sessions"]

CLI_ACTOR = "cli"  # the tombstone's actor of a deletion made straight to Redis


def _refused(exc: ApiError) -> int:
    if exc.status in (401, 403):
        raise exc
    say_error(exc.message)
    return 2


@click.command("delete", help="Delete a run, its sub-agents' runs and everything derived from them; a running run "
               "is aborted first. An unknown run is an error (exit code 2).")  # fmt: skip
@click.argument("run_id")
@json_option
@reach
def run_delete(run_id: str, as_json: bool, api_url: str | None, token: str | None, tenant: str) -> None:
    async def go() -> int:
        if api_url:
            async with api_client(api_url, token) as c:
                try:
                    out = (await c.delete_run(run_id)).model_dump(mode="json", by_alias=True)
                except ApiError as exc:
                    return _refused(exc)
        else:
            async with direct_producer() as p:
                try:
                    done = await Eraser(p).delete_run(run_id, tenant, CLI_ACTOR)
                except ParentRunningError as exc:
                    say_error(str(exc))
                    return 2
            if done is None:
                say_error(f"no run {run_id} for tenant {tenant}")
                return 2
            out = {"runId": run_id, "deletedAt": done.deleted_at, "runsDeleted": done.runs,
                   "alreadyDeleted": done.already}  # fmt: skip
        if as_json:
            emit_json(out)
        elif out["alreadyDeleted"]:
            console.print(f"run {run_id} was deleted before")
        else:
            console.print(f"run {run_id} deleted ({out['runsDeleted']} runs with its sub-agents')")
        return 0

    exit_with(go())


@click.group(help="Sessions: delete one with every run of it.")
def sessions() -> None:
    pass


@sessions.command("delete", help="Delete every run of a session, and the session. Unknown: exit code 2.")
@click.argument("session_id")
@json_option
@reach
def session_delete(
    session_id: str, as_json: bool, api_url: str | None, token: str | None, tenant: str
) -> None:
    async def go() -> int:
        if api_url:
            async with api_client(api_url, token) as c:
                try:
                    n: int | None = (await c.delete_session(session_id)).runs_deleted
                except ApiError as exc:
                    return _refused(exc)
        else:
            async with direct_producer() as p:
                n = await Eraser(p).delete_session(session_id, tenant, CLI_ACTOR)
            if n is None:
                say_error(f"no session {session_id} for tenant {tenant}")
                return 2
        if as_json:
            emit_json({"sessionId": session_id, "runsDeleted": n})
        else:
            console.print(f"session {session_id} deleted ({n} runs)")
        return 0

    exit_with(go())


@click.group(help="Deletions by metadata: every run whose metadata matches, deleted by the workers in steps.")
def deletions() -> None:
    pass


def _show(view: dict[str, Any], as_json: bool) -> None:
    if as_json:
        emit_json(view)
    else:
        console.print(f"deletion {view['deletionId']}: {view['state']}, {view['deleted']} of {view['matched']} "
                      "matching runs deleted")  # fmt: skip


@deletions.command("create", help="Delete every run whose metadata has these values (in the background).")
@click.option(
    "--metadata", "pairs", multiple=True, required=True, help="key=value (repeatable: all must match)"
)
@click.option("--wait", is_flag=True, help="wait until it is done, showing its progress")
@json_option
@reach
def deletion_create(
    pairs: tuple[str, ...], wait: bool, as_json: bool, api_url: str | None, token: str | None, tenant: str
) -> None:
    metadata = dict(p.partition("=")[::2] for p in pairs)
    if any(not k for k in metadata) or any("=" not in p for p in pairs):
        raise click.BadParameter("key=value", param_hint="--metadata")

    async def go() -> int:
        if api_url:
            async with api_client(api_url, token) as c:
                try:
                    view = (await c.create_deletion(metadata)).model_dump(mode="json", by_alias=True)
                    while wait and view["state"] != "done":
                        await asyncio.sleep(0.5)
                        view = (await c.get_deletion(view["deletionId"])).model_dump(
                            mode="json", by_alias=True
                        )
                except ApiError as exc:
                    return _refused(exc)
        else:
            async with direct_producer() as p:
                jobs = DeletionJobs(p)
                view = await jobs.create(tenant, metadata, CLI_ACTOR)
                while wait and view["state"] != "done":
                    await asyncio.sleep(0.5)
                    view = await jobs.get(tenant, view["deletionId"]) or view
        _show(view, as_json)
        return 0

    exit_with(go())


@deletions.command("status", help="A deletion's progress: its state, the runs matched and deleted.")
@click.argument("deletion_id")
@json_option
@reach
def deletion_status(
    deletion_id: str, as_json: bool, api_url: str | None, token: str | None, tenant: str
) -> None:
    async def go() -> int:
        if api_url:
            async with api_client(api_url, token) as c:
                try:
                    view: dict[str, Any] | None = (await c.get_deletion(deletion_id)).model_dump(
                        mode="json", by_alias=True
                    )
                except ApiError as exc:
                    return _refused(exc)
        else:
            async with direct_producer() as p:
                view = await DeletionJobs(p).get(tenant, deletion_id)
        if view is None:
            say_error(f"no deletion {deletion_id} for tenant {tenant}")
            return 2
        _show(view, as_json)
        return 0

    exit_with(go())
