"""A listing row is declared once (shared.listing_row.ListingRow) and reaches the three places that
read it: list_runs.lua's HMGET, the archive's SELECT and the parser by name. Every declared field
is written with a value of its own into a run hash on a real Redis and into the archive (a real
PostgreSQL), and both listings give it back under that field's name; a field added to the
declaration (here a subclass of it) is listed by both with no other change."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from redis.asyncio import Redis

from shared import keys
from shared.archive.store import ArchiveStore, archived_run
from shared.fields import RunField as F
from shared.listing_row import ListingRow, hash_fields, select_list
from shared.scripts import Scripts, render, source
from tests.support.postgres_server import PostgresServer, binaries

pytestmark = pytest.mark.integration
TENANT = "tenant-a"
RUN_ID = "run-listed"
CREATED = "1700000000123"


def _value(i: int) -> str:
    return str(1_800_000_000_000 + i)  # digits: the archive keeps some fields as numbers too


def _hash(row: type[ListingRow]) -> dict[str, str]:
    """A run hash with a value of its own in every field ``row`` declares (its creation: CREATED)."""
    h = {F.TENANT.value: TENANT, F.LAST_SEQ.value: "0"}
    for i, f in enumerate(dataclasses.fields(row)[1:]):
        h[f.metadata["hash_field"]] = _value(i)
    h[F.CREATED_AT.value] = CREATED
    return h


def _expected(row: type[ListingRow]) -> dict[str, str]:
    want = {f.name: _value(i - 1) for i, f in enumerate(dataclasses.fields(row))}
    want.update(run_id=RUN_ID, created_at=CREATED)
    return want


async def _stored(redis: Redis, part: keys.Partition, h: dict[str, str]) -> None:
    await redis.hset(part.run(RUN_ID), mapping=h)  # type: ignore[misc]
    await redis.zadd(part.index_key(TENANT, "all"), {RUN_ID: int(CREATED)})


def _args() -> list[Any]:
    return [TENANT, 10, 100, "", "", "", "", 0]  # the tenant's first page, no filter


def test_the_lua_and_the_sql_are_rendered_from_the_declaration() -> None:
    lua = render(source("list_runs"))
    listed = ", ".join(f"'{f}'" for f in hash_fields())
    assert f"redis.call('HMGET', run_key(id), '{F.TENANT}', {listed})" in lua
    sql = select_list()
    assert sql.startswith("key_id AS run_id, ")
    assert all(f"record->>'{f}'" in sql for f in hash_fields())
    assert hash_fields()[0] == F.STATUS  # list_runs.lua takes it as the hash's existence


async def test_every_declared_field_is_listed_by_name_from_redis(redis: Redis) -> None:
    part = keys.Partition(0, 1)
    await _stored(redis, part, _hash(ListingRow))
    reply = await Scripts(redis).list_runs(*Scripts(redis).frame(part, [], _args()))
    assert len(reply) == 2 + ListingRow.width()
    assert dataclasses.asdict(ListingRow.parse(reply[2:])) == _expected(ListingRow)


@dataclasses.dataclass(frozen=True)
class _Wider(ListingRow):
    """The declaration with one more field."""

    webhook: str = dataclasses.field(default="", metadata={"hash_field": F.WEBHOOK.value})


async def test_a_field_added_to_the_declaration_reaches_the_lua(redis: Redis) -> None:
    part = keys.Partition(0, 1)
    await _stored(redis, part, _hash(_Wider))
    listed = ", ".join(f"'{f}'" for f in hash_fields(_Wider))
    code = render(source("list_runs").replace("__LISTING_FIELDS__", listed))
    own_keys, args = Scripts(redis).frame(part, [], _args())
    reply = await redis.eval(code, len(own_keys), *own_keys, *args)  # type: ignore[misc]
    assert len(reply) == 2 + _Wider.width()
    assert dataclasses.asdict(_Wider.parse(reply[2:])) == _expected(_Wider)


@pytest.mark.skipif(binaries() is None, reason="no PostgreSQL binaries (initdb, pg_ctl) installed")
async def test_the_archive_lists_the_same_row_as_redis_and_a_field_added_too(redis: Redis) -> None:
    part = keys.Partition(0, 1)
    await _stored(redis, part, _hash(_Wider))
    reply = await Scripts(redis).list_runs(*Scripts(redis).frame(part, [], _args()))
    from_redis = ListingRow.parse(reply[2:])
    with PostgresServer() as pg:
        store = ArchiveStore(pg.url)
        try:
            assert await store.write([archived_run(RUN_ID, "events:x", _hash(_Wider), [], {}, None)]) == 1
            (row, stream, _), *more = await store.list_page(
                TENANT, equal={}, meta=[], created_after=None, created_before=None, cursor=None, limit=10
            )
            assert (row, stream, more) == (from_redis, "events:x", [])
            wider = await store.fetch(f"SELECT {select_list(_Wider)} FROM runs WHERE key_id = $1", RUN_ID)
            assert dataclasses.asdict(_Wider.parse(list(wider[0].values()))) == _expected(_Wider)
        finally:
            await store.aclose()
