"""Another tenant can neither squat nor detect an id: every id a named
tenant's runs and sessions go by is kept under an HMAC of (tenant, id) with the deployment's secret,
so no global id exists to take first, and what a tenant sees never depends on another tenant's ids.
The attacks as reported, against the API over a real Redis."""

from __future__ import annotations

import asyncio
import hashlib
import re
from typing import Any

import httpx
import orjson
import pytest
from starlette.requests import Request
from starlette.responses import Response

from tests.integration.api_support import A, B, HookServer, api, body, settings
from tests.integration.helpers import running_worker

pytestmark = pytest.mark.integration


def sha_scoped(tenant: str, client_id: str) -> str:
    """The tenant-scoped id as it was computable before (sha256 of the tenant and the id)."""
    return "tsc_" + hashlib.sha256(f"{tenant}\0{client_id}".encode()).hexdigest()[:40]


def sha_key_run(tenant: str, key: str) -> str:
    """The run id an Idempotency-Key named before: computable from the tenant and the key."""
    return "run_" + hashlib.sha256(f"{tenant}\0{key}".encode()).hexdigest()[:32]


def sha_batch_item(tenant: str, batch_id: str, i: int) -> str:
    """Item ``i`` of a batch as it was named before: computable from the tenant and the batch."""
    return "run_" + hashlib.sha256(f"{tenant}\0batch\0{batch_id}".encode()).hexdigest()[:32] + f"_{i}"


async def _squat_then_take(redis_url: str, squats: list[dict[str, Any]], take: dict[str, Any]) -> None:
    """B submits ``squats`` (A's future ids in every form B can compute), then A ``take``s its id."""
    async with (
        api(settings(redis_url)) as url,
        httpx.AsyncClient(base_url=url, headers=A) as ca,
        httpx.AsyncClient(base_url=url, headers=B) as cb,
    ):
        for squat in squats:
            await cb.post("/v1/runs", json=body(**squat, autoCreateSession="sessionId" in squat))
        if "batchId" in take:
            r = await ca.post("/v1/runs/batch", json={"runs": [body()], "batchId": take["batchId"]})
            item = r.json()["results"][0]
            assert r.status_code == 200 and "error" not in item, r.text
            assert (await ca.get(f"/v1/runs/{item['runId']}")).status_code == 200
            return
        headers = {"Idempotency-Key": take["key"]} if "key" in take else {}
        r = await ca.post("/v1/runs", json=body(**take.get("body", {})), headers=headers)
        assert r.status_code == 202, r.text
        assert r.json()["runId"] == take.get("body", {}).get("runId", r.json()["runId"]), r.text


async def test_another_tenant_cannot_squat_a_run_id(redis_url: str) -> None:
    squats = [{"runId": "future-id"}, {"runId": sha_scoped("tenant-a", "future-id")}]
    await _squat_then_take(redis_url, squats, {"body": {"runId": "future-id"}})


async def test_another_tenant_cannot_squat_a_session_id(redis_url: str) -> None:
    squats = [{"sessionId": "future-ses"}, {"sessionId": sha_scoped("tenant-a", "future-ses")}]
    take = {"body": {"sessionId": "future-ses", "autoCreateSession": True}}
    await _squat_then_take(redis_url, squats, take)


async def test_another_tenant_cannot_squat_an_idempotency_key_run(redis_url: str) -> None:
    rid = sha_key_run("tenant-a", "order-7")
    squats = [{"runId": rid}, {"runId": sha_scoped("tenant-a", rid)}]
    await _squat_then_take(redis_url, squats, {"key": "order-7"})


async def test_another_tenant_cannot_squat_a_batch_item(redis_url: str) -> None:
    rid = sha_batch_item("tenant-a", "nightly-8", 0)
    squats = [{"runId": rid}, {"runId": sha_scoped("tenant-a", rid)}]
    await _squat_then_take(redis_url, squats, {"batchId": "nightly-8"})


async def test_the_scoped_form_is_refused_from_clients(redis_url: str) -> None:
    async with api(settings(redis_url)) as url, httpx.AsyncClient(base_url=url, headers=B) as cb:
        for field, kw in (("runId", {"runId": "tsc_0123"}), ("sessionId", {"sessionId": "tsc_0123"})):
            r = await cb.post("/v1/runs", json=body(**kw, autoCreateSession=True))
            assert r.status_code == 422, r.text
            err = r.json()["error"]
            assert err["code"] == "reserved_id" and err["field"] == field and "tsc_" in err["message"], err
        r = await cb.post("/v1/runs/batch", json={"runs": [body(runId="tsc_1")]})
        assert r.json()["results"][0]["error"]["code"] == "reserved_id", r.text


def _shape(view: dict[str, Any], *ids: str) -> str:
    """A view with its own ids and the hex of its keys masked: what it says beyond its ids."""
    raw = orjson.dumps({k: v for k, v in view.items() if k != "createdAt"}).decode()
    for i in ids:
        raw = raw.replace(i, "<id>")
    return re.sub(r"[0-9a-f]{16,}", "<hex>", raw)


async def test_what_a_tenant_sees_never_says_another_tenant_holds_an_id(redis_url: str) -> None:
    async with (
        api(settings(redis_url)) as url,
        httpx.AsyncClient(base_url=url, headers=A) as ca,
        httpx.AsyncClient(base_url=url, headers=B) as cb,
    ):
        assert (await ca.post("/v1/runs", json=body(runId="held-1"))).status_code == 202
        await ca.post("/v1/runs", json=body(runId="held-s", sessionId="ses-held", autoCreateSession=True))
        await ca.post("/v1/runs/batch", json={"runs": [body(), body()], "batchId": "flood-5"})
        views = {}
        for rid, sid in (("held-1", "ses-held"), ("free-1", "ses-free")):
            r = await cb.post("/v1/runs", json=body(runId=rid, sessionId=sid, autoCreateSession=True))
            assert r.status_code == 202, r.text
            views[rid] = (await cb.get(f"/v1/runs/{rid}")).json()
            assert views[rid]["runId"] == rid and views[rid]["sessionId"] == sid, views[rid]
            assert rid not in views[rid]["streamKey"]  # the key is the tenant's HMAC of the id
        assert _shape(views["held-1"], "held-1", "ses-held") == _shape(views["free-1"], "free-1", "ses-free")
        listed = {x["runId"]: x for x in (await cb.get("/v1/runs")).json()["runs"]}
        assert {x.get("sessionId") for x in listed.values()} == {"ses-held", "ses-free"}, listed
        for sid in ("ses-held", "ses-free"):
            assert (await cb.get(f"/v1/sessions/{sid}")).json()["sessionId"] == sid
            page = (await cb.get("/v1/runs", params={"sessionId": sid})).json()["runs"]
            assert [x["sessionId"] for x in page] == [sid], page
        # A's batch, a run B has not and a free one all answer B alike.
        for path in ("/v1/batches/flood-5", "/v1/batches/flood-6", "/v1/runs/held-s", "/v1/runs/free-9"):
            assert (await cb.get(path)).status_code == 404, path
        r = await cb.post("/v1/runs/batch", json={"runs": [body()], "batchId": "flood-5"})
        assert "error" not in r.json()["results"][0], r.text
        assert (await cb.get("/v1/batches/flood-5")).json()["total"] == 1


async def test_a_batch_webhook_delivery_id_names_no_tenant_and_no_key(redis_url: str) -> None:
    received: list[tuple[str, bytes]] = []

    async def hook(request: Request) -> Response:
        received.append((request.headers["X-Agentmill-Delivery"], await request.body()))
        return Response(status_code=204)

    receiver = HookServer(hook)
    await receiver.start()
    hook_url = f"http://127.0.0.1:{receiver.port}/hook"
    try:
        async with (
            api(settings(redis_url, webhook_allow_hosts="127.0.0.1")) as url,
            httpx.AsyncClient(base_url=url, headers=A) as ca,
            running_worker(redis_url),
        ):
            r = await ca.post(
                "/v1/runs/batch", json={"runs": [body()], "batchId": "b-7", "batchWebhook": hook_url}
            )
            rid = r.json()["results"][0]["runId"]
            hooked = body(runId="hooked", sessionId="ses-h", autoCreateSession=True, webhook=hook_url)
            assert (await ca.post("/v1/runs", json=hooked)).status_code == 202
            for _ in range(200):
                if len(received) == 2:
                    break
                await asyncio.sleep(0.05)
            assert len(received) == 2, received
            ids = {orjson.loads(b).get("runId", "batch"): d for d, b in received}
            assert set(ids) == {"batch", "hooked"}, received
            for d in ids.values():
                assert "tenant-a" not in d and "{" not in d and ":" not in d and "b-7" not in d, d
                assert "hooked" not in d and rid not in d, d
            assert ids["batch"] != ids["hooked"]
            # The run's view, result, events and webhook show the ids its client chose, never a key.
            sent = next(orjson.loads(b) for _, b in received if b"hooked" in b)
            assert sent["runId"] == "hooked" and sent["sessionId"] == "ses-h", sent
            view = (await ca.get("/v1/runs/hooked")).json()
            assert view["result"]["runId"] == "hooked" and view["result"]["sessionId"] == "ses-h", view
            events = (await ca.get("/v1/runs/hooked/events", params={"format": "json"})).json()
            session = (await ca.get("/v1/sessions/ses-h")).json()
            assert [lp["runId"] for lp in session["history"]] == ["hooked"] == session["runs"], session
            seen = orjson.dumps([{k: v for k, v in view.items() if k != "streamKey"}, events, sent, session])
            assert b"tsc_" not in seen, seen
    finally:
        await receiver.stop()


async def test_errors_name_the_ids_the_client_chose_never_their_keys(redis_url: str) -> None:
    async with api(settings(redis_url)) as url, httpx.AsyncClient(base_url=url, headers=B) as cb:
        first = body(runId="r-1", sessionId="s-int", autoCreateSession=True)
        assert (await cb.post("/v1/runs", json=first)).status_code == 202
        r = await cb.post("/v1/runs", json=body(runId="r-2", sessionId="s-int", multitaskStrategy="reject"))
        assert r.status_code == 409 and r.json()["error"]["code"] == "session_busy", r.text
        assert "tsc_" not in r.text and "s-int" in r.text, r.text
        r = await cb.post("/v1/runs", json=body(runId="r-1", agent="other"))
        assert r.status_code in (404, 409, 422) and "tsc_" not in r.text, r.text
        r = await cb.post(
            "/v1/runs", json=body(runId="r-3", sessionId="s-int", multitaskStrategy="interrupt")
        )
        assert r.status_code == 202, r.text
        view = (await cb.get("/v1/runs/r-1")).json()
        assert view["status"] == "aborted", view
        assert view["result"]["lastError"]["message"] == "interrupted by run r-3", view


async def _answers_to_b(url: str) -> list[str]:
    """What B is answered for a fixed series of requests, timestamps masked."""
    out: list[str] = []
    async with httpx.AsyncClient(base_url=url, headers=B) as cb:
        for method, path, kw in [
            ("POST", "/v1/runs", {"json": body(runId="x1")}),
            ("POST", "/v1/runs", {"json": body(runId="x2", sessionId="s1", autoCreateSession=True)}),
            ("POST", "/v1/runs", {"json": body(runId="x3", sessionId="s1", multitaskStrategy="reject")}),
            ("POST", "/v1/runs", {"json": body(), "headers": {"Idempotency-Key": "k1"}}),
            ("POST", "/v1/runs/batch", {"json": {"runs": [body(), body(runId="x4")], "batchId": "bt1"}}),
            ("POST", "/v1/runs", {"json": body(runId="x1", metadata={"other": 1})}),
            ("GET", "/v1/runs/x1", {}),
            ("GET", "/v1/runs/x2", {}),
            ("GET", "/v1/runs/a-only", {}),
            ("GET", "/v1/sessions/s1", {}),
            ("GET", "/v1/sessions/a-ses", {}),
            ("GET", "/v1/runs", {}),
            ("GET", "/v1/runs", {"params": {"sessionId": "s1"}}),
            ("GET", "/v1/batches/bt1", {}),
            ("GET", "/v1/batches/a-batch", {}),
            ("POST", "/v1/runs/x1/abort", {}),
            ("POST", "/v1/runs/a-only/abort", {}),
        ]:
            r = await cb.request(method, path, **kw)
            out.append(
                f"{method} {path} {r.status_code} " + re.sub(r'"(createdAt|finishedAt)":\d+', "", r.text)
            )
    return out


async def test_another_tenants_ids_never_change_what_a_tenant_is_answered(redis_url: str, redis: Any) -> None:
    """B's answers to the same requests, once on an empty Redis and once after A used every id B
    will use (in each form A can compute) and ids of its own, are the same."""
    async with api(settings(redis_url)) as url:
        alone = await _answers_to_b(url)
    await redis.flushall()
    async with api(settings(redis_url)) as url, httpx.AsyncClient(base_url=url, headers=A) as ca:
        for rid in ("x1", "x2", "x3", "x4", "a-only"):
            for form in (rid, sha_scoped("tenant-b", rid)):
                await ca.post("/v1/runs", json=body(runId=form))
        for sid in ("s1", sha_scoped("tenant-b", "s1"), "a-ses"):
            await ca.post("/v1/runs", json=body(sessionId=sid, autoCreateSession=True))
        await ca.post("/v1/runs", json=body(), headers={"Idempotency-Key": "k1"})
        for name in ("bt1", "a-batch"):
            await ca.post("/v1/runs/batch", json={"runs": [body(), body()], "batchId": name})
        crowded = await _answers_to_b(url)
    assert crowded == alone
