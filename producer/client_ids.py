"""The id a tenant knows a run by, from the id its keys use: a view that names another run (a child's
parent) names it as its tenant knows it, never by the scoped key (``tsc_…``) it is kept under."""

from __future__ import annotations

from typing import Any

from redis.asyncio import Redis

from producer.archived import ArchiveReads
from producer.scope import SCOPED_PREFIX
from shared.archive import groups
from shared.fields import RunField
from shared.replies import text
from shared.script_sending import Parts

__all__ = ["client_id_of"]


async def client_id_of(parts: Parts, archive: ArchiveReads | None, key_id: str, tenant: str) -> str | None:
    """The id ``tenant`` knows its run ``key_id`` by: ``key_id`` itself unless it is a scoped key,
    else the run's client id (from its hash, or from the archive once the run left Redis); None
    when neither holds the run."""
    if not key_id.startswith(SCOPED_PREFIX):
        return key_id
    part = await parts.locate(key_id)
    if part is not None:

        async def read(c: Redis) -> list[Any]:
            return list(await c.hmget(part.run(key_id), [RunField.CLIENT_ID, RunField.TENANT]))  # type: ignore[misc]

        fields = await parts.call(part, read)
        client, owner = (text(v) if v is not None else None for v in fields)
        if client and owner == tenant:
            return client
    if archive is not None:
        return (await groups.client_ids(archive.store, [key_id], tenant)).get(key_id)
    return None
