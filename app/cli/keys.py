"""``agentmill keys create|list|revoke`` and ``agentmill audit``: a tenant's managed API keys and its
audit log, straight to Redis (``--tenant``: what an operator does first, with the token file as the
bootstrap) or through the HTTP API (``--api`` with an admin key's token). ``create`` prints the key
once, on stdout; only its keyed hash is kept (AGENTMILL_KEY_SECRET). ``keys rotate-data`` seals the
archive again under the current data key (shared/archive/rekey.py)."""

from __future__ import annotations

import time
from datetime import UTC, datetime
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

__all__ = ["audit", "keys"]


@click.group(help="Managed API keys of a tenant (/v1/keys): create, list, revoke.")
def keys() -> None:
    pass


def _when(ms: int | None) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ") if ms else "-"


def _line(k: dict[str, Any]) -> str:
    state = (
        "revoked"
        if k.get("revokedAt")
        else "expired"
        if (k.get("expiresAt") or 1e18) <= time.time() * 1000
        else "active"
    )
    return (
        f"{k['keyId']}  {k.get('name') or '-'}  {','.join(k['scopes'])}  {state}  created {_when(k['createdAt'])}"
        f"  last used {_when(k.get('lastUsedAt'))}  expires {_when(k.get('expiresAt'))}"
    )


def _cli_actor() -> Any:
    from producer.audit import Actor, request_id_of

    return Actor("cli", "agentmill keys", request_id_of(None))


@keys.command("create", help="Create a key and print it (once: only its keyed hash is kept).")
@click.option("--scopes", required=True, help="comma list of read, submit, control, admin (and operator)")
@click.option("--name", default="", help="a name to know it by")
@click.option("--expires", default=None, help="a life such as 30d, 12h, 90m (default: never)")
@json_option
@reach
def create(
    scopes: str,
    name: str,
    expires: str | None,
    as_json: bool,
    api_url: str | None,
    token: str | None,
    tenant: str,
) -> None:
    from shared import api_keys

    try:
        wanted = api_keys.parse_scopes(scopes)
        ttl = api_keys.parse_duration(expires) if expires else None
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None

    async def go() -> int:
        if api_url:
            async with api_client(api_url, token) as c:
                made = (await c.keys.create(sorted(wanted), name=name, expires_in_s=ttl)).model_dump(
                    by_alias=True
                )
        else:
            from producer import audit
            from producer.key_store import KeyStore, TooManyKeysError

            async with direct_producer() as p:
                try:
                    rec, key = await KeyStore(p.parts, p.settings).create(
                        tenant, wanted, name=name, expires_in_s=ttl, created_by="cli"
                    )
                except TooManyKeysError as exc:
                    raise ApiError(409, "too_many_keys", str(exc)) from None
                await audit.record(p.parts, p.settings.audit_max_entries, tenant, _cli_actor(),
                                   audit.Action.KEY_CREATE, rec.key_id, f"tenant={tenant} scopes={scopes}",
                                   archived=p.archive is not None)  # fmt: skip
                made = {**rec.view(), "key": key}
        if as_json:
            emit_json(made)
        else:
            console.print(_line(made), soft_wrap=True, highlight=False, markup=False, style=None)
            print(made["key"])
        return 0

    exit_with(go())


@keys.command("list", help="The tenant's keys (never the keys themselves), oldest first.")
@json_option
@reach
def ls(as_json: bool, api_url: str | None, token: str | None, tenant: str) -> None:
    async def go() -> int:
        if api_url:
            async with api_client(api_url, token) as c:
                found = [k.model_dump(by_alias=True) for k in await c.keys.list()]
        else:
            from producer.key_store import KeyStore

            async with direct_producer() as p:
                found = [r.view() for r in await KeyStore(p.parts, p.settings).list(tenant)]
        for k in found:
            if as_json:
                emit_json(k)
            else:
                console.print(_line(k), soft_wrap=True, highlight=False, markup=False)
        return 0

    exit_with(go())


@keys.command("revoke", help="Revoke a key: every API process refuses it within a second.")
@click.argument("key_id")
@json_option
@reach
def revoke(key_id: str, as_json: bool, api_url: str | None, token: str | None, tenant: str) -> None:
    async def go() -> int:
        if api_url:
            async with api_client(api_url, token) as c:
                verdict = (await c.keys.revoke(key_id)).result
        else:
            from producer import audit
            from producer.key_store import KeyStore

            async with direct_producer() as p:
                verdict = await KeyStore(p.parts, p.settings).revoke(tenant, key_id)
                if verdict == "revoked":
                    await audit.record(p.parts, p.settings.audit_max_entries, tenant, _cli_actor(),
                                       audit.Action.KEY_REVOKE, key_id, archived=p.archive is not None)  # fmt: skip
            if verdict == "unknown":
                raise ApiError(404, "unknown_key", f"no key {key_id} of tenant {tenant}")
        if as_json:
            emit_json({"keyId": key_id, "result": verdict})
        else:
            console.print(f"{key_id} {verdict}", highlight=False, markup=False)
        return 0

    exit_with(go())


@click.command(help="The tenant's audit log, oldest first (GET /v1/audit).")
@click.option("--action", default=None, help="only this action (submit, abort, approve, key_create, …)")
@click.option("--target", default=None, help="only entries about this run, batch, schedule or key")
@click.option("--limit", type=click.IntRange(1, 1000), default=100, show_default=True)
@json_option
@reach
def audit(
    action: str | None, target: str | None, limit: int, as_json: bool, api_url: str | None, token: str | None,
    tenant: str,
) -> None:  # fmt: skip
    async def go() -> int:
        if api_url:
            async with api_client(api_url, token) as c:
                page = await c.audit(action=action, target=target, limit=limit)
                entries = [e.model_dump(by_alias=True) for e in page.entries]
        else:
            from producer import audit as log

            async with direct_producer() as p:
                q = log.AuditQuery(action=action, target=target, limit=limit)
                archive = p.archive.store if p.archive is not None else None
                entries, _ = await log.read(p.parts, tenant, q, archive)
        for e in entries:
            if as_json:
                emit_json(e)
            else:
                who = e["actor"] + (f" ({e['actorName']})" if e.get("actorName") else "")
                line = f"{_when(e['at'])}  {e['action']}  {e['target']}  by {who}  {e.get('detail') or ''}"
                console.print(line.rstrip(), soft_wrap=True, highlight=False, markup=False)
        return 0

    exit_with(go())


@keys.command(
    "rotate-data",
    help="Seal the archive's rows again under the current data key (the first of AGENTMILL_DATA_KEYS), "
    "with progress on stderr; safe to stop and run again. Keep every older key listed until it is done.",
)
@click.option(
    "--page", type=click.IntRange(1, 10_000), default=200, show_default=True, help="runs a transaction"
)
@click.option(
    "--pause-ms", type=click.IntRange(0, 60_000), default=0, show_default=True, help="pause between pages"
)
@json_option
def rotate_data(page: int, pause_ms: int, as_json: bool) -> None:
    from shared.settings import get_settings

    settings = get_settings()
    if not settings.archive_url:
        raise click.UsageError("AGENTMILL_ARCHIVE_URL is not set: there is no archive to rotate")
    if not settings.data_keys:
        raise click.UsageError("AGENTMILL_DATA_KEYS is not set: there is no current data key")

    async def go() -> int:
        from shared.archive.rekey import Progress, rekey
        from shared.archive.store import ArchiveStore
        from shared.payload_crypto import Codec, DataKeyError

        codec = Codec.from_spec(settings.data_keys)

        def report(p: Progress) -> None:
            click.echo(f"rotate-data: {p.runs}/{p.total} runs, {p.rows} rows sealed again under {codec.current}",
                       err=True)  # fmt: skip

        assert settings.archive_url
        store = ArchiveStore(settings.archive_url)
        try:
            done = await rekey(store, codec, page=page, pause_s=pause_ms / 1000, report=report)
        except DataKeyError as exc:
            say_error(f"{exc}: list it again (after the current key) and run rotate-data again")
            return 2
        finally:
            await store.aclose()
        if as_json:
            emit_json(
                {"current": codec.current, "runs": done.runs, "rows": done.rows, "strings": done.strings}
            )
        else:
            console.print(f"{done.runs} runs looked at, {done.rows} rows sealed again under {codec.current}",
                          highlight=False, markup=False)  # fmt: skip
        return 0

    exit_with(go())
