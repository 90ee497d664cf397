"""The audit log kept for good in the archive (a real PostgreSQL started by the test, skipped when
its binaries are missing): the archiver's copy writes each entry once however often it runs, and
GET /v1/audit answers the same pages once Redis has trimmed the stream, continuing into Redis for
what came after."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from redis.asyncio import Redis

from shared.archive.audit_copy import AuditCopier
from shared.archive.store import ArchiveStore
from tests.integration.api_support import A, api, settings
from tests.integration.helpers import producer_for
from tests.support.postgres_server import PostgresServer, binaries

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(90),
    pytest.mark.skipif(binaries() is None, reason="no PostgreSQL binaries (initdb, pg_ctl) installed"),
]


async def pages(c: httpx.AsyncClient, limit: int, **params: Any) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []
    cursor = None
    while True:
        q = {"limit": limit, **params, **({"cursor": cursor} if cursor else {})}
        page = (await c.get("/v1/audit", params=q, headers=A)).json()
        seen += page["entries"]
        cursor = page["next"]
        if cursor is None:
            return seen


async def test_the_archive_keeps_the_audit_log_once_redis_trimmed_it(redis: Redis, redis_url: str) -> None:
    with PostgresServer() as pg:
        s = settings(redis_url, archive_url=pg.url)
        store = ArchiveStore(pg.url)
        try:
            async with api(s) as url, httpx.AsyncClient(base_url=url) as c:
                made = [(await c.post("/v1/keys", json={"scopes": ["read"], "name": f"k{i}"}, headers=A)).json()
                        for i in range(4)]  # fmt: skip
                for m in made[:2]:
                    assert (await c.delete(f"/v1/keys/{m['keyId']}", headers=A)).status_code == 200
                before = await pages(c, 100)
                assert [e["action"] for e in before] == ["key_create"] * 4 + ["key_revoke"] * 2
                copier = AuditCopier(producer_for(redis, redis_url).parts, store)
                assert await copier.copy_once() == 6
                assert await copier.copy_once() == 0  # its mark moved: nothing copied twice
                part = producer_for(redis, redis_url).parts.home("tenant-a")
                await redis.delete(part.audit_copied("tenant-a"))  # an archiver that lost its mark
                assert await copier.copy_once() == 6
                rows = await store.fetch("SELECT count(*) AS n FROM audit_log")
                assert rows[0]["n"] == 6
                await redis.xtrim(part.audit("tenant-a"), maxlen=0)  # Redis's retention trimmed it all
                assert await pages(c, 100) == before
                assert await pages(c, 4) == before
                # after the trim, new entries in Redis: a page runs from the archive into Redis
                for m in made[2:]:
                    assert (await c.delete(f"/v1/keys/{m['keyId']}", headers=A)).status_code == 200
                now = await pages(c, 5)
                assert now[:6] == before and [e["target"] for e in now[6:]] == [m["keyId"] for m in made[2:]]
                assert await pages(c, 100, action="key_revoke") == [
                    e for e in now if e["action"] == "key_revoke"
                ]
                assert await pages(c, 2, **{"from": before[3]["at"]}) == [
                    e for e in now if e["at"] >= before[3]["at"]
                ]
        finally:
            await store.aclose()
