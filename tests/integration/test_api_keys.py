"""Managed API keys through the API on a real Redis: created by the token file's admin (the
bootstrap), used, refused for a scope they lack (403 naming it), expired (401 key_expired),
revoked (401 key_revoked), listed without the key, and kept apart by tenant; and read tokens that
read one run's events over SSE and nothing else."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import orjson
import pytest
from redis.asyncio import Redis

from tests.integration.api_support import A, B, api, run_body, settings
from worker.process.jobs import WorkerProcess

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def new_key(
    c: httpx.AsyncClient, scopes: list[str], headers: dict[str, str] = A, **kw: Any
) -> dict[str, Any]:
    r = await c.post("/v1/keys", json={"scopes": scopes, **kw}, headers=headers)
    assert r.status_code == 201, r.text
    return dict(r.json())


async def test_a_read_key_reads_but_cannot_submit_and_the_store_holds_no_key(
    redis: Redis, redis_url: str
) -> None:
    async with api(settings(redis_url)) as url, httpx.AsyncClient(base_url=url) as c:
        made = await new_key(c, ["read"], name="dashboard")
        assert made["key"].startswith("amk_" + made["keyId"]) and made["tenant"] == "tenant-a"
        read = bearer(made["key"])
        assert (await c.get("/v1/runs", headers=read)).status_code == 200
        me = (await c.get("/v1/me", headers=read)).json()
        assert me == {"tenant": "tenant-a", "operator": False, "scopes": ["read"], "actor": made["keyId"]}
        assert (await c.get("/v1/me", headers=A)).json()["actor"] == "token-file"
        r = await c.post("/v1/runs", json=run_body(), headers=read)
        assert r.status_code == 403 and r.json()["error"]["code"] == "scope_required"
        assert "submit" in r.json()["error"]["message"]
        r = await c.post("/v1/keys", json={"scopes": ["admin"]}, headers=read)
        assert r.status_code == 403 and "admin" in r.json()["error"]["message"]
        # a submit key submits; it is tenant-a's
        sub = bearer((await new_key(c, ["submit"]))["key"])
        r = await c.post("/v1/runs", json=run_body(), headers=sub)
        assert r.status_code == 202, r.text
        run_id = r.json()["runId"]
        assert (await c.get(f"/v1/runs/{run_id}", headers=read)).status_code == 200
        assert (await c.get(f"/v1/runs/{run_id}", headers=B)).status_code == 404
        # listed without the key; the key appears nowhere in Redis
        listed = (await c.get("/v1/keys", headers=A)).json()["keys"]
        assert {k["keyId"] for k in listed} >= {made["keyId"]} and all("key" not in k for k in listed)
        assert (await c.get("/v1/keys", headers=B)).json()["keys"] == []
        secret = made["key"].split("_", 2)[2]
        for k in await redis.keys("*"):
            if (await redis.type(k)) == b"hash":
                assert all(secret.encode() not in v for v in (await redis.hgetall(k)).values())
        # another tenant's admin cannot revoke it; an unknown or a wrong secret is 401
        assert (await c.delete(f"/v1/keys/{made['keyId']}", headers=B)).status_code == 404
        wrong = made["key"][:-4] + "AAAA"
        r = await c.get("/v1/runs", headers=bearer(wrong))
        assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized"


async def test_an_expired_key_gets_key_expired_and_a_revoked_one_key_revoked(redis_url: str) -> None:
    async with api(settings(redis_url)) as url, httpx.AsyncClient(base_url=url) as c:
        short = await new_key(c, ["read"], expiresInS=1)
        assert (await c.get("/v1/me", headers=bearer(short["key"]))).status_code == 200
        await asyncio.sleep(1.05)
        r = await c.get("/v1/me", headers=bearer(short["key"]))
        assert r.status_code == 401 and r.json()["error"]["code"] == "key_expired"
        assert r.headers["www-authenticate"] == "Bearer"
        kept = await new_key(c, ["read"])
        assert (await c.get("/v1/me", headers=bearer(kept["key"]))).status_code == 200
        r = await c.delete(f"/v1/keys/{kept['keyId']}", headers=A)
        assert r.json() == {"keyId": kept["keyId"], "result": "revoked"}
        await asyncio.sleep(0.6)  # this process's cache of the key: 0.5 s
        r = await c.get("/v1/me", headers=bearer(kept["key"]))
        assert r.status_code == 401 and r.json()["error"]["code"] == "key_revoked"
        view = next(
            k for k in (await c.get("/v1/keys", headers=A)).json()["keys"] if k["keyId"] == kept["keyId"]
        )
        assert view["revokedAt"] and view["lastUsedAt"]


async def test_an_admin_key_manages_its_tenants_keys_and_an_operator_any_tenants(redis_url: str) -> None:
    async with (
        api(settings(redis_url, operator_tenants="tenant-b")) as url,
        httpx.AsyncClient(base_url=url) as c,
    ):
        admin = bearer((await new_key(c, ["admin", "read", "control"]))["key"])
        made = await new_key(c, ["read", "control"], admin, name="ops")
        assert made["tenant"] == "tenant-a" and made["createdBy"] != "token-file"
        r = await c.post("/v1/keys", json={"scopes": ["read"], "tenant": "tenant-b"}, headers=admin)
        assert r.status_code == 403 and r.json()["error"]["code"] == "operator_required"
        r = await c.post("/v1/keys", json={"scopes": ["operator"]}, headers=admin)
        assert r.status_code == 403 and r.json()["error"]["code"] == "operator_required"
        # tenant-b's token is an operator's: it manages tenant-a's keys
        other = await new_key(c, ["read"], B, tenant="tenant-a")
        assert other["tenant"] == "tenant-a"
        assert (await c.delete(f"/v1/keys/{made['keyId']}", params={"tenant": "tenant-a"}, headers=B)).json()[
            "result"
        ] == "revoked"
        r = await c.post("/v1/keys", json={"scopes": ["fly"]}, headers=A)
        assert r.status_code == 422


async def sse_events(c: httpx.AsyncClient, path: str, **kw: Any) -> list[dict[str, Any]]:
    out = []
    async with c.stream("GET", path, **kw) as r:
        assert r.status_code == 200, await r.aread()
        async for line in r.aiter_lines():
            if line.startswith("data:"):
                ev = orjson.loads(line[5:])
                out.append(ev)
                if ev["kind"] == "status" and ev["payload"]["status"] in ("completed", "failed", "aborted"):
                    break
    return out


async def test_a_read_token_reads_its_runs_events_over_sse_and_nothing_else(
    redis_url: str, worker: WorkerProcess
) -> None:
    async with api(settings(redis_url)) as url, httpx.AsyncClient(base_url=url, timeout=20) as c:
        mine = (await c.post("/v1/runs", json=run_body(), headers=A)).json()["runId"]
        other = (await c.post("/v1/runs", json=run_body(), headers=A)).json()["runId"]
        r = await c.post(f"/v1/runs/{mine}/token", json={"ttlS": 60}, headers=A)
        assert r.status_code == 200, r.text
        token = r.json()["token"]
        assert r.json()["eventsUrl"] == f"/v1/runs/{mine}/events?token={token}"
        events = await sse_events(c, f"/v1/runs/{mine}/events", params={"token": token})
        assert events and events[-1]["payload"]["status"] == "completed"
        assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
        # nothing else: another run's events, the run itself, any route with it as a bearer token
        r = await c.get(f"/v1/runs/{other}/events", params={"token": token})
        assert r.status_code == 403 and r.json()["error"]["code"] == "token_scope"
        assert (await c.get(f"/v1/runs/{mine}", params={"token": token})).status_code == 401
        assert (await c.get(f"/v1/runs/{mine}/events", headers=bearer(token))).status_code == 401
        assert (await c.get("/v1/runs", headers=bearer(token))).status_code == 401
        r = await c.get(f"/v1/runs/{mine}/events", params={"token": token[:-3] + "abc"})
        assert r.status_code == 401
        # another tenant cannot mint one for it; the life is bounded
        assert (await c.post(f"/v1/runs/{mine}/token", headers=B)).status_code == 404
        r = await c.post(f"/v1/runs/{mine}/token", json={"ttlS": 10**9}, headers=A)
        assert r.status_code == 422
        short = (await c.post(f"/v1/runs/{mine}/token", json={"ttlS": 1}, headers=A)).json()["token"]
        t0 = time.monotonic()
        await asyncio.sleep(max(0.0, 1.05 - (time.monotonic() - t0)))
        r = await c.get(f"/v1/runs/{mine}/events", params={"token": short, "format": "json"})
        assert r.status_code == 401 and r.json()["error"]["code"] == "token_expired"
