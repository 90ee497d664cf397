"""Every route of the app that takes a bearer token, tried as an attacker would: a managed key of
the right tenant lacking the route's scope gets 403 ``scope_required`` naming it, and another
tenant's key holding every scope gets 404 for the first tenant's object (its run, session, batch,
schedule, key, agent, version or deletion), never its data. Table-driven over ROUTE_SCOPES, so a
new route is tried as soon as it is declared. Against the API on a real Redis with a worker."""

from __future__ import annotations

import asyncio
import itertools
import os
from collections import Counter
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from producer.api.scopes import ROUTE_SCOPES
from shared.api_keys import Scope
from tests.integration.api_support import A, B, api, run_body, until_view
from tests.integration.api_support import settings as api_settings
from tests.support.fuzz_seed import DERANDOMIZE
from tests.support.live_api import live_api
from worker.process.jobs import WorkerProcess

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
TENANT_SCOPES = ("read", "submit", "control", "admin")


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def new_key(c: httpx.AsyncClient, scopes: list[str], headers: dict[str, str]) -> str:
    r = await c.post("/v1/keys", json={"scopes": scopes}, headers=headers)
    assert r.status_code == 201, r.text
    return str(r.json()["key"])


async def tenant_a_objects(c: httpx.AsyncClient) -> dict[str, str]:
    """One of each of tenant A's objects a path can name."""
    run = (
        await c.post("/v1/runs", json=run_body(sessionId="ses-a", autoCreateSession=True), headers=A)
    ).json()
    view = await until_view(c, f"/v1/runs/{run['runId']}", lambda v: v.get("status") == "completed", 30, 0.05)
    assert view.get("status") == "completed", view
    r = await c.post("/v1/runs/batch", json={"runs": [run_body()], "batchId": "batch-a"}, headers=A)
    assert r.status_code == 200, r.text
    r = await c.post(
        "/v1/schedules", json={"scheduleId": "sched-a", "cron": "0 0 1 1 *", "input": run_body()}, headers=A
    )
    assert r.status_code == 201, r.text
    r = await c.post("/v1/keys", json={"scopes": ["read"], "name": "a-key"}, headers=A)
    key_id = r.json()["keyId"]
    agent = {"name": "support", "provider": {"connection": "scripted"}, "systemPrompt": "hi"}
    r = await c.post("/v1/agents", json=agent, headers=A)
    assert r.status_code == 201, r.text
    r = await c.post("/v1/deletions", json={"metadata": {"nothing": "matches"}}, headers=A)
    assert r.status_code == 202, r.text
    return {"run_id": run["runId"], "session_id": "ses-a", "batch_id": "batch-a", "schedule_id": "sched-a",
            "key_id": key_id, "name": "support", "version": "1", "deletion_id": r.json()["deletionId"]}  # fmt: skip


# A valid body for each route that takes one, so the refusal is the scope's or the tenant's, not the body's.
BODIES: dict[tuple[str, str], Any] = {
    ("POST", "/v1/runs"): run_body(),
    ("POST", "/v1/runs/batch"): {"runs": [run_body()]},
    ("POST", "/v1/runs/{run_id}/token"): {"ttlS": 60},
    ("POST", "/v1/runs/{run_id}/tool-results"): {"results": [{"toolCallId": "c1", "content": "x"}]},
    ("POST", "/v1/runs/{run_id}/approvals"): {"decisions": [{"toolCallId": "c1", "approved": True}]},
    ("POST", "/v1/runs/{run_id}/retry"): {"from": "start"},
    ("POST", "/v1/runs/{run_id}/fork"): {"atSeq": 0},
    ("POST", "/v1/schedules"): {"cron": "0 0 1 1 *", "input": run_body()},
    ("POST", "/v1/keys"): {"scopes": ["read"]},
    ("POST", "/v1/agents"): {"name": "x", "provider": {"connection": "scripted"}},
    ("POST", "/v1/agents/{name}/current"): {"version": 1},
    ("POST", "/v1/deletions"): {"metadata": {"k": "v"}},
}
FREE = {"run_id": "free-run", "session_id": "free-ses", "batch_id": "free-batch", "schedule_id": "free-sched",
        "key_id": "amkfree0000", "name": "free-agent", "version": "1", "deletion_id": "del_free"}  # fmt: skip
SCOPED = sorted((m, p, s) for (m, p), s in ROUTE_SCOPES.items() if s is not None)


def _path(path: str, ids: dict[str, str]) -> str:
    for k, v in ids.items():
        path = path.replace("{" + k + "}", v)
    assert "{" not in path, path
    return path


def _masked(text: str, ids: dict[str, str]) -> str:
    for k, v in sorted(ids.items(), key=lambda kv: -len(kv[1])):  # the longest first: no id inside another
        if k != "version":
            text = text.replace(v, f"<{k}>")
    return text


async def test_every_scoped_route_refuses_a_key_without_its_scope_and_another_tenants_key(
    redis_url: str, worker: WorkerProcess
) -> None:
    async with (
        api(api_settings(redis_url)) as url,
        httpx.AsyncClient(base_url=url, headers=A, timeout=20) as c,
    ):
        ids = await tenant_a_objects(c)
        lacking = {
            s: bearer(await new_key(c, [x for x in TENANT_SCOPES if x != s], A)) for s in TENANT_SCOPES
        }
        b_all = bearer(await new_key(c, list(TENANT_SCOPES), B))
        refused: list[str] = []
        for method, route, scope in SCOPED:
            assert scope in (Scope.READ, Scope.SUBMIT, Scope.CONTROL, Scope.ADMIN), (route, scope)
            path = _path(route, ids)
            kw: dict[str, Any] = {"json": BODIES[(method, route)]} if (method, route) in BODIES else {}
            if route.endswith("/events"):
                kw["params"] = {"format": "json"}
            r = await c.request(method, path, headers=lacking[scope.value], **kw)
            assert r.status_code == 403, (method, route, r.text)
            err = r.json()["error"]
            assert err["code"] == "scope_required" and scope.value in err["message"], (route, err)
            if "{" in route:  # another tenant's key, holding every scope, on A's object
                r = await c.request(method, path, headers=b_all, **kw)
                assert r.status_code == 404, (method, route, r.status_code, r.text)
                # and it says nothing a free id's answer does not: no existence oracle
                free = await c.request(method, _path(route, FREE), headers=b_all, **kw)
                assert free.status_code == 404 and _masked(r.text, ids) == _masked(free.text, FREE), (
                    route, r.text, free.text)  # fmt: skip
            refused.append(f"{method} {route}")
        assert len(refused) == len(SCOPED) >= 40
        # and A's objects are still there, untouched by B's attempts
        for p in (f"/v1/runs/{ids['run_id']}", "/v1/schedules/sched-a", "/v1/agents/support",
                  f"/v1/deletions/{ids['deletion_id']}", "/v1/sessions/ses-a", "/v1/batches/batch-a"):  # fmt: skip
            assert (await c.get(p, headers=A)).status_code == 200, p
        keys = (await c.get("/v1/keys", headers=A)).json()["keys"]
        assert not any(k.get("revokedAt") for k in keys if k["keyId"] == ids["key_id"]), keys


# The same refusals under generated requests, with the API and a worker in their own processes and
# auth on: any route that takes a bearer token, a key of tenant A holding any subset of the scopes
# or tenant B's key holding them all, A's ids, B's ids or free ones, and a valid body or a
# generated one. Never a 5xx; a key lacking the route's scope never gets a 2xx (a 403 when the body
# is valid); B's key never gets a 2xx on A's object.
IDS_B = {"run_id": "run-b", "session_id": "ses-b", "batch_id": "batch-b", "schedule_id": "sched-b",
         "name": "agent-b", "version": "1"}  # fmt: skip
JUNK = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)


@pytest.fixture(scope="module")
def live(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[str, dict[str, dict[str, str]], dict[str, str]]]:
    env = {"AGENTMILL_AUTH_DISABLED": "false", "AGENTMILL_API_TOKENS": "tok-a=tenant-a,tok-b=tenant-b",
           "AGENTMILL_ID_SECRET": "fuzz-secret-0123456789abcdef0123"}  # fmt: skip
    with live_api(tmp_path_factory.mktemp("api"), **env) as url, httpx.Client(base_url=url, timeout=20) as c:
        ids = asyncio.run(_objects(url))
        with httpx.Client(base_url=url, timeout=20, headers=B) as cb:
            cb.post("/v1/runs", json=run_body(runId="run-b", sessionId="ses-b", autoCreateSession=True))
            cb.post("/v1/runs/batch", json={"runs": [run_body()], "batchId": "batch-b"})
            cb.post("/v1/schedules", json={"scheduleId": "sched-b", "cron": "0 0 1 1 *", "input": run_body()})
            cb.post("/v1/agents", json={"name": "agent-b", "provider": {"connection": "scripted"}})
        keys: dict[str, dict[str, str]] = {}
        for n in (1, len(TENANT_SCOPES) - 1):  # each scope alone, and each lacking
            for held in itertools.combinations(TENANT_SCOPES, n):
                r = c.post("/v1/keys", json={"scopes": list(held)}, headers=A)
                keys["a:" + ",".join(held)] = bearer(r.json()["key"])
        keys["a:"] = {"Authorization": "Bearer amk_0000000000000000_forged"}
        keys["b:" + ",".join(TENANT_SCOPES)] = bearer(
            c.post("/v1/keys", json={"scopes": list(TENANT_SCOPES)}, headers=B).json()["key"]
        )
        yield url, keys, ids


async def _objects(url: str) -> dict[str, str]:
    async with httpx.AsyncClient(base_url=url, headers=A, timeout=20) as c:
        return await tenant_a_objects(c)


def test_generated_requests_respect_scopes_and_tenants(
    live: tuple[str, dict[str, dict[str, str]], dict[str, str]],
) -> None:
    _generated(live, int(os.environ.get("AGENTMILL_FUZZ_EXAMPLES", "25")) * 2)


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_generated_requests_respect_scopes_and_tenants_long(
    live: tuple[str, dict[str, dict[str, str]], dict[str, str]],
) -> None:
    _generated(live, 1000)


def _generated(live: tuple[str, dict[str, dict[str, str]], dict[str, str]], examples: int) -> None:
    url, keys, ids_a = live
    seen: Counter[str] = Counter()
    request = st.tuples(
        st.sampled_from(SCOPED),
        st.one_of(st.just(next(k for k in keys if k.startswith("b:"))), st.sampled_from(sorted(keys))),
        st.sampled_from(["a", "b", "free"]),
        st.one_of(st.none(), JUNK),
    )

    @settings(max_examples=examples, deadline=None,
              suppress_health_check=list(HealthCheck), database=None, derandomize=DERANDOMIZE)  # fmt: skip
    @given(req=request)
    def check(req: tuple[tuple[str, str, Scope], str, str, Any]) -> None:
        (method, route, scope), who, whose, junk = req
        ids = {"a": ids_a, "b": {**ids_a, **IDS_B}, "free": FREE}[whose]
        valid = junk is None
        kw: dict[str, Any] = {}
        if method in ("POST", "DELETE") and ((method, route) in BODIES or not valid):
            kw["json"] = BODIES.get((method, route)) if valid else junk
        r = httpx.request(method, url + _path(route, ids), headers=keys[who], timeout=10, **kw)
        seen[f"{who.partition(':')[0]} {r.status_code}"] += 1
        assert r.status_code < 500, (method, route, who, whose, junk, r.text)
        holds = scope.value in who.partition(":")[2].split(",")
        if not holds:
            assert r.status_code in ((401, 403) if valid else (401, 403, 404, 422)), (route, who, r.text)
        if who.startswith("b:") and whose == "a" and "{" in route:
            assert not 200 <= r.status_code < 300, (method, route, r.text)

    check()
    assert seen["a 403"] and seen["b 404"] and any(k.endswith(("200", "201", "202")) for k in seen), seen
