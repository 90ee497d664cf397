"""The governance and agent routes tried as an adversarial tenant would, against the API on a real
Redis: each attack is written as tried, with the answer it gets. Read tokens reused for another
run, another tenant's run of the same id, after expiry or tampered; keys with huge names or scope
lists, expiring in the past, granting more than the caller holds; audit filters used as an
oracle; forged audit cursors; deletions by metadata meant to reach another tenant's runs or with
values no run can hold; agent names and versions that smuggle a version or a path; agent profiles
that smuggle a URL (provider, HTTP tool, MCP server) or raise a limit past the operator's."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
import pytest

from tests.integration.api_support import A, B, api, run_body, settings, until_view
from worker.process.jobs import WorkerProcess

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]
AGENT = {"provider": {"connection": "scripted"}, "systemPrompt": "x"}


@pytest.fixture
async def c(redis_url: str) -> AsyncIterator[httpx.AsyncClient]:
    async with (
        api(settings(redis_url)) as url,
        httpx.AsyncClient(base_url=url, headers=A, timeout=20) as client,
    ):
        yield client


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def done(c: httpx.AsyncClient, run_id: str, headers: dict[str, str] = A) -> dict[str, Any]:
    view = await until_view(c, f"/v1/runs/{run_id}", lambda v: v.get("status") == "completed", 30, 0.05)
    assert view.get("status") == "completed", view
    return view


async def test_a_forged_audit_cursor_is_a_400_not_a_500(c: httpx.AsyncClient) -> None:
    # Attack: a cursor of the documented shape whose parts are past a stream id's 64-bit range
    # (Redis refused the range: was a 500).
    await c.post("/v1/keys", json={"scopes": ["read"]})
    for cursor in ("99999999999999999999-99999999999999999999", "18446744073709551616-0",
                   "0-18446744073709551616", "18446744073709551615-18446744073709551615", "1-1"):  # fmt: skip
        r = await c.get("/v1/audit", params={"cursor": cursor})
        assert r.status_code in (200, 400), (cursor, r.text)
        if r.status_code == 400:
            assert r.json()["error"]["code"] == "invalid_cursor", r.text
    # A cursor the shape check let through with a trailing newline or non-ASCII digits (int() reads
    # both; Redis refused the range: was a 500).
    for cursor in ("0-0\n", "1-1\n", "\u0661-\u0661", "0-\u0660"):
        r = await c.get("/v1/audit", params={"cursor": cursor})
        assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_cursor", (cursor, r.text)
    r = await c.get("/v1/audit", params={"cursor": "18446744073709551615-0"})
    assert r.status_code == 200 and r.json() == {"entries": [], "next": None}, r.text
    r = await c.get("/v1/audit", params={"cursor": "0-0"})
    assert r.status_code == 200 and r.json()["entries"], r.text


async def test_a_deletion_by_a_value_no_run_can_hold_is_a_422_not_a_500(c: httpx.AsyncClient) -> None:
    # Attack: an integer past 64 bits (the terms were made with orjson, which refused it: a 500).
    for value in (10**40, -(10**40), 2**64):
        r = await c.post("/v1/deletions", json={"metadata": {"k": value}})
        err = r.json()["error"]
        assert r.status_code == 422 and err["code"] == "invalid_input" and "metadata" in err["message"], (
            r.text
        )
    # what a run can hold still works
    r = await c.post("/v1/deletions", json={"metadata": {"k": 2**63 - 1}})
    assert r.status_code == 202, r.text


async def test_agent_names_and_versions_that_smuggle_are_refused(c: httpx.AsyncClient) -> None:
    """Attack: names with a version, a path or unicode in them; versions negative, huge, in
    non-ASCII digits (``²`` is a digit to str.isdigit and not to int(): was a 500; ``١`` silently
    named version 1)."""
    for name in ("support@-1", "support@999999999999", "sé", "\u202e", "a" * 65, "", "../x", "a/b", "x@1"):
        r = await c.post("/v1/agents", json={"name": name, **AGENT})
        assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_agent", (name, r.text)
    r = await c.post("/v1/agents", json={"name": "scripted", **AGENT})  # the operator's profile's name
    assert r.status_code == 422 and "operator" in r.json()["error"]["message"], r.text
    assert (await c.post("/v1/agents", json={"name": "support", **AGENT})).status_code == 201
    refused = ("support@-1", "support@999999999999", "support@0", "support@1.5", "support@", "@1",
               "support@1@2", "support@\u00b2", "support@\u0661", "support@\uff11", "support@" + "9" * 5000)  # fmt: skip
    for agent in refused:
        r = await c.post("/v1/runs", json={**run_body(), "agent": agent})
        assert r.status_code == 422, (agent, r.text)
        assert r.json()["error"]["code"] in ("unknown_agent", "unknown_version", "invalid_input"), (
            agent,
            r.text,
        )
    r = await c.post("/v1/runs", json={**run_body(), "agent": "support@1"})
    assert r.status_code == 202, r.text
    assert (await c.get(f"/v1/runs/{r.json()['runId']}")).json()["agentVersion"] == 1
    for version in ("99999999999999999999999", "-1", "0"):
        r = await c.get(f"/v1/agents/support/versions/{version}")
        assert r.status_code in (404, 422), (version, r.text)
    r = await c.post("/v1/agents/support/current", json={"version": 10**30})
    assert r.status_code == 422 and r.json()["error"]["code"] == "unknown_version", r.text
    # another tenant sees none of it, and its own "support" is its own
    assert (await c.get("/v1/agents/support", headers=B)).status_code == 404
    r = await c.post("/v1/runs", json={**run_body(), "agent": "support@1"}, headers=B)
    assert r.status_code == 404 and r.json()["error"]["code"] == "unknown_agent", r.text


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


async def test_a_read_token_reads_its_own_run_and_nothing_else(
    c: httpx.AsyncClient, worker: WorkerProcess
) -> None:
    """Attack: A's read token of run ``same`` used on B's run ``same`` (B's bearer beside it), on
    another of A's runs, with its payload rewritten (another run, another tenant, a later expiry)
    under the same signature, huge, in unicode, doubled; minted with a life out of bounds."""
    mine = (await c.post("/v1/runs", json=run_body(runId="same"))).json()["runId"]
    r = await c.post("/v1/runs", json=run_body([{"text": "B-SECRET"}], runId="same"), headers=B)
    assert r.status_code == 202, r.text
    other = (await c.post("/v1/runs", json=run_body(runId="other"))).json()["runId"]
    for rid, h in ((mine, A), ("same", B), (other, A)):
        await done(c, rid, h)
    token = (await c.post(f"/v1/runs/{mine}/token", json={"ttlS": 60})).json()["token"]
    for headers in ({}, B):  # the token reads A's run, whoever's bearer comes with it
        r = await c.get("/v1/runs/same/events", params={"token": token, "format": "json"}, headers=headers)
        assert r.status_code == 200 and "hello" in r.text and "B-SECRET" not in r.text, r.text
    r = await c.get(f"/v1/runs/{other}/events", params={"token": token, "format": "json"}, headers={})
    assert r.status_code == 403 and r.json()["error"]["code"] == "token_scope", r.text
    head, _, sig = token.removeprefix("amr_").partition(".")
    claims = orjson.loads(base64.urlsafe_b64decode(head + "=" * (-len(head) % 4)))
    forged = [
        {**claims, "r": other},
        {**claims, "t": "tenant-b"},
        {**claims, "e": claims["e"] + 10**9},
    ]
    for fake in forged:
        t = f"amr_{_b64(orjson.dumps(fake))}.{sig}"
        for rid in (mine, other):
            r = await c.get(f"/v1/runs/{rid}/events", params={"token": t, "format": "json"}, headers={})
            assert r.status_code in (401, 403) and "hello" not in r.text, (fake, r.text)
    for bad in ("x" * 20_000, "amr_\u00e9\u0000.abc", token + "." + token, "amr_", "amr_.", token.upper()):
        r = await c.get(f"/v1/runs/{mine}/events", params={"token": bad, "format": "json"}, headers={})
        assert r.status_code in (401, 422), (bad[:20], r.text)
    for ttl in (0, -1, "60", 10**30, 1e308, 86401):
        r = await c.post(f"/v1/runs/{mine}/token", json={"ttlS": ttl})
        assert r.status_code == 422, (ttl, r.text)
    # A's run deleted: its token reads nothing more
    assert (await c.delete(f"/v1/runs/{mine}")).status_code == 200
    r = await c.get(f"/v1/runs/{mine}/events", params={"token": token, "format": "json"}, headers={})
    assert r.status_code in (404, 410) and "hello" not in r.text, r.text


async def test_keys_that_ask_for_too_much_are_refused(c: httpx.AsyncClient) -> None:
    """Attack: a huge name or scope list, scopes in another spelling, expiry in the past or absurdly
    far, another tenant, the operator scope, and a read key or an admin key asking for more."""
    refused = [
        ({"scopes": ["read"], "name": "n" * 100_000}, 422),
        ({"scopes": ["read"] * 1000}, 422),
        ({"scopes": "read,admin,operator"}, 422),
        ({"scopes": []}, 422),
        ({"scopes": ["READ"]}, 422),
        ({"scopes": ["read"], "expiresInS": -5}, 422),
        ({"scopes": ["read"], "expiresInS": 0}, 422),
        ({"scopes": ["read"], "expiresInS": 10**20}, 422),
        ({"scopes": ["read"], "expiresInS": 1.5}, 422),
        ({"scopes": ["read"], "tenant": "tenant-b"}, 403),
        ({"scopes": ["operator"]}, 403),
    ]
    for body, status in refused:
        r = await c.post("/v1/keys", json=body)
        assert r.status_code == status, (body, r.text)
    r = await c.post("/v1/keys", json={"scopes": ["read"] * 5})  # repeated: one scope
    assert r.status_code == 201 and r.json()["scopes"] == ["read"], r.text
    r = await c.post("/v1/keys", json={"scopes": [" read "]})  # spaced: the scope (no more than asked)
    assert r.status_code == 201 and r.json()["scopes"] == ["read"], r.text
    read = bearer(r.json()["key"])
    admin = bearer((await c.post("/v1/keys", json={"scopes": ["admin"]})).json()["key"])
    r = await c.post("/v1/keys", json={"scopes": ["admin"]}, headers=read)
    assert r.status_code == 403 and r.json()["error"]["code"] == "scope_required", r.text
    for body in ({"scopes": ["operator"]}, {"scopes": ["read"], "tenant": "tenant-b"}):
        r = await c.post("/v1/keys", json=body, headers=admin)
        assert r.status_code == 403 and r.json()["error"]["code"] == "operator_required", r.text
    assert (await c.get("/v1/keys", headers=B)).json()["keys"] == []


async def test_the_audit_log_is_no_oracle_for_another_tenant(c: httpx.AsyncClient) -> None:
    """Attack: B filters its audit log by A's run id, by A's key id, by an action A did; names A's
    tenant; pages from a cursor that A's stream holds. B is answered as if A had done nothing."""

    async def b_sees() -> list[Any]:
        out = []
        for q in ({"target": "a-run"}, {"target": key_id}, {"action": "key_create"}, {"action": "submit"},
                  {"cursor": cursor}, {}):  # fmt: skip
            r = await c.get("/v1/audit", params=q, headers=B)
            out.append((r.status_code, [(e["action"], e["target"]) for e in r.json().get("entries", [])]))
        return out

    key_id, cursor = "0000", "0-0"
    before = await b_sees()
    assert (await c.post("/v1/runs", json=run_body(runId="a-run"))).status_code == 202
    key_id = (await c.post("/v1/keys", json={"scopes": ["read"]})).json()["keyId"]
    mine = (await c.get("/v1/audit")).json()["entries"]
    assert {e["target"] for e in mine} >= {"a-run", key_id}, mine
    cursor = mine[0]["id"]
    after = await b_sees()
    assert [e for _, es in after for e in es] == [e for _, es in before for e in es] == [], after
    r = await c.get("/v1/audit", params={"tenant": "tenant-a"}, headers=B)
    assert r.status_code == 403 and r.json()["error"]["code"] == "operator_required", r.text
    r = await c.get("/v1/audit", params={"action": "everything"}, headers=B)
    assert r.status_code == 422, r.text


async def test_a_deletion_by_metadata_reaches_only_its_tenants_runs(
    c: httpx.AsyncClient, worker: WorkerProcess
) -> None:
    """Attack: B asks to delete every run whose metadata is ``team=blue`` (A's runs have it too),
    and with terms meant to match anything (``*``, an empty key)."""
    a_runs = [
        (await c.post("/v1/runs", json=run_body(metadata={"team": "blue"}))).json()["runId"] for _ in range(3)
    ]
    r = await c.post("/v1/runs", json=run_body(metadata={"team": "blue"}), headers=B)
    b_run = r.json()["runId"]
    for rid in a_runs:
        await done(c, rid)
    for meta in ({"*": "*"}, {"team": "*"}, {"": ""}, {"team": "blue"}):
        r = await c.post("/v1/deletions", json={"metadata": meta}, headers=B)
        assert r.status_code in (202, 422), (meta, r.text)
        if r.status_code == 202:
            did = r.json()["deletionId"]
            for _ in range(300):
                view = (await c.get(f"/v1/deletions/{did}", headers=B)).json()
                if view.get("state") == "done":
                    break
                await asyncio.sleep(0.1)
            assert view.get("state") == "done", view
            assert (await c.get(f"/v1/deletions/{did}")).status_code == 404  # A cannot read B's deletion
    assert view["metadata"] == {"team": "blue"} and view["deleted"] == 1, view
    assert (await c.get(f"/v1/runs/{b_run}", headers=B)).status_code == 404
    for rid in a_runs:
        assert (await c.get(f"/v1/runs/{rid}")).json()["status"] == "completed"
    listed = (await c.get("/v1/runs", params={"meta": "team=blue"})).json()["runs"]
    assert {x["runId"] for x in listed} == set(a_runs), listed


async def test_an_agent_profile_cannot_smuggle_a_url_or_raise_a_limit(c: httpx.AsyncClient) -> None:
    """Attack: a tenant's agent naming a provider by URL or key of its own, a connection named as a
    URL, HTTP tools and MCP servers on loopback and metadata addresses (every IPv4 form), limits
    past the operator's, a priority, a fallback chain to a URL."""
    attacks: list[tuple[dict[str, Any], str]] = [
        ({"provider": {"kind": "openai", "baseUrl": "http://169.254.169.254/"}}, "provider.kind"),
        ({"provider": {"connection": "scripted", "baseUrl": "http://169.254.169.254/"}}, "provider.baseUrl"),
        ({"provider": {"connection": "http://169.254.169.254/"}}, "provider.connection"),
        ({"provider": {"connection": "scripted", "apiKey": "sk-mine"}}, "provider.apiKey"),
        ({**AGENT, "httpTools": [{"name": "t", "url": "http://127.0.0.1:6379/"}]}, "httpTools.0.url"),
        ({**AGENT, "httpTools": [{"name": "t", "url": "http://[::ffff:127.0.0.1]/"}]}, "httpTools.0.url"),
        ({**AGENT, "httpTools": [{"name": "t", "url": "http://2130706433/"}]}, "httpTools.0.url"),
        ({**AGENT, "mcpServers": [{"name": "m", "url": "http://169.254.169.254/"}]}, "mcpServers.0.url"),
        ({**AGENT, "mcpServers": [{"name": "m", "url": "http://[::ffff:0:a9fe:a9fe]/"}]}, "mcpServers.0.url"),
        ({**AGENT, "loopLimits": {"maxDepth": 100}}, "loopLimits.maxDepth"),
        ({**AGENT, "priority": 10**9}, "priority"),
        (
            {"providers": [{"connection": "scripted"}, {"kind": "openai", "baseUrl": "http://10.0.0.1"}]},
            "provider",
        ),
    ]
    for i, (profile, field) in enumerate(attacks):
        r = await c.post("/v1/agents", json={"name": f"smuggle-{i}", **profile})
        assert r.status_code == 422, (profile, r.text)
        err = r.json()["error"]
        assert err["code"] == "invalid_agent" and err["field"].startswith(field), (profile, err)
    assert (await c.get("/v1/agents")).json()["agents"][0]["source"] == "operator"


async def test_a_key_name_cannot_carry_terminal_or_bidi_controls(c: httpx.AsyncClient) -> None:
    """Attack: a tenant admin names a key with terminal escapes or a right-to-left override, which
    `agentmill keys list` and the audit log show to the operator verbatim (was accepted: 201)."""
    for name in (
        "\x1b[2J\x1b]0;owned\x07",
        "a\x00b",
        "ok\u202etxt.exe",
        "\u2066x\u2069",
        "line\nbreak",
        "\x85",
        "\udbe8x",  # a lone surrogate, as JSON's \u escapes carry it
        "\udce0\udbe8\uffba\u00a4N{",
    ):
        sent = json.dumps({"scopes": ["read"], "name": name})  # ASCII: \u escapes for all of them
        r = await c.post("/v1/keys", content=sent, headers={"content-type": "application/json"})
        assert r.status_code == 422 and "name" in r.json()["error"]["message"], (name, r.text)
    r = await c.post("/v1/keys", json={"scopes": ["read"], "name": "café ☕ dashboard – prod"})
    assert r.status_code == 201 and r.json()["name"] == "café ☕ dashboard – prod", r.text


async def test_a_key_for_an_empty_tenant_is_refused(redis_url: str) -> None:
    """Found by the route fuzzer: an operator asking for a key of tenant "" got a 500."""
    async with (
        api(settings(redis_url, operator_tenants="tenant-a")) as url,
        httpx.AsyncClient(base_url=url, headers=A, timeout=20) as c,
    ):
        for tenant in ("", " ", "a\x00b"):
            r = await c.post("/v1/keys", json={"scopes": ["read"], "name": "n", "tenant": tenant})
            assert r.status_code == 422 and "tenant" in r.json()["error"]["message"], (tenant, r.text)


async def test_an_agents_extra_body_cannot_override_what_the_pool_sends_or_prices(
    c: httpx.AsyncClient,
) -> None:
    """Attack: a tenant's agent picks a cheap model on the operator's connection (what its budget
    is priced and reserved on) and, in ``provider.extraBody``, the model, token bound or choice
    count the provider really gets, or the conversation, tools and streaming the pool sends (the
    worker merges extraBody over its request body last). Was accepted: 201."""
    for extra in ({"model": "gpt-4.5-preview"}, {"max_tokens": 10**6}, {"max_completion_tokens": 10**6},
                  {"n": 8}, {"stream": False}, {"stream_options": {}}, {"messages": []}, {"tools": []},
                  {"tool_choice": "none"}, {"response_format": {"type": "text"}}, {"temperature": 2}):  # fmt: skip
        provider = {"connection": "scripted", "model": "gpt-4o-mini", "extraBody": extra}
        r = await c.post("/v1/agents", json={"name": "cheap", "provider": provider})
        assert r.status_code == 422, (extra, r.text)
        err = r.json()["error"]
        assert err["code"] == "invalid_agent" and err["field"] == f"provider.extraBody.{next(iter(extra))}", (
            err
        )
    provider = {"connection": "scripted", "extraBody": {"seed": 7, "top_p": 0.5, "user": "u-1"}}
    r = await c.post("/v1/agents", json={"name": "cheap", "provider": provider})
    assert r.status_code == 201, r.text


async def test_an_agents_loop_limits_cannot_raise_the_sub_agent_depth(c: httpx.AsyncClient) -> None:
    """Attack: a tenant's agent with ``loopLimits.maxDepth`` 10: a root run's profile sets its
    tree's depth ceiling, so the tenant's own profile lifted the default 3 (was accepted: 201)."""
    for depth in (10, 4):
        r = await c.post("/v1/agents", json={"name": "deep", **AGENT, "loopLimits": {"maxDepth": depth}})
        assert r.status_code == 422, (depth, r.text)
        err = r.json()["error"]
        assert err["field"] == "loopLimits.maxDepth" and "3" in err["message"], err
    r = await c.post("/v1/agents", json={"name": "deep", **AGENT, "loopLimits": {"maxDepth": 2}})
    assert r.status_code == 201, r.text


async def test_an_admin_key_grants_only_the_scopes_it_holds(c: httpx.AsyncClient) -> None:
    """Attack: an admin key (no submit, no control) mints a key with submit or control, doing by
    proxy what it may not do itself (was accepted: 201)."""
    admin = bearer((await c.post("/v1/keys", json={"scopes": ["admin", "read"]})).json()["key"])
    for scopes, named in (
        (["submit"], "submit"),
        (["admin", "control"], "control"),
        (["control", "submit"], "control, submit"),
    ):
        r = await c.post("/v1/keys", json={"scopes": scopes}, headers=admin)
        err = r.json()["error"]
        assert r.status_code == 403 and err["code"] == "scope_required" and named in err["message"], r.text
    r = await c.post("/v1/keys", json={"scopes": ["read"]}, headers=admin)
    assert r.status_code == 201 and r.json()["scopes"] == ["read"], r.text
    assert (await c.post("/v1/keys", json={"scopes": ["admin", "read"]}, headers=admin)).status_code == 201
    # the token file's tokens hold every scope: they grant any
    assert (await c.post("/v1/keys", json={"scopes": ["submit", "control", "admin"]})).status_code == 201


async def test_a_key_cannot_mint_a_key_that_outlives_it(c: httpx.AsyncClient) -> None:
    """Attack: an admin key given for a minute mints an admin key that never expires (or expires
    after it), keeping the access its expiry was meant to end (was accepted: 201)."""
    made = await c.post("/v1/keys", json={"scopes": ["admin", "read"], "expiresInS": 60})
    short = bearer(made.json()["key"])
    for body in ({"scopes": ["admin"]}, {"scopes": ["read"], "expiresInS": 3600}):
        r = await c.post("/v1/keys", json=body, headers=short)
        err = r.json()["error"]
        assert r.status_code == 422 and err["code"] == "invalid_input" and "expiresInS" in err["message"], (
            r.text
        )
    r = await c.post("/v1/keys", json={"scopes": ["read"], "expiresInS": 30}, headers=short)
    assert r.status_code == 201 and r.json()["expiresAt"] <= r.json()["createdAt"] + 30_000, r.text
    # a key without an expiry (and the token file's tokens) mint what they like
    forever = bearer((await c.post("/v1/keys", json={"scopes": ["admin"]})).json()["key"])
    assert (await c.post("/v1/keys", json={"scopes": ["admin"]}, headers=forever)).status_code == 201


async def test_the_routes_without_a_bearer_token_take_hostile_input(c: httpx.AsyncClient) -> None:
    """The routes outside the OpenAPI document the fuzzers read (the console's files, /metrics,
    the probes): paths that climb out, huge, NUL, unicode; metrics tokens forged."""
    names = ["..%2f..%2fetc%2fpasswd", "%2e%2e/%2e%2e/pyproject.toml", "a" * 5000, "%00", "é.js", "index.html%00.js",
             "..\\..\\x", "%252e%252e%252f"]  # fmt: skip
    for name in names:
        r = await c.get(f"/ui/{name}", headers={})
        assert r.status_code in (200, 404) and "[project]" not in r.text and "root:" not in r.text, (
            name,
            r.text[:200],
        )
    for token in ("x" * 10_000, "%C3%A9", "Bearer", "a\tb"):
        r = await c.get("/metrics", headers={"Authorization": f"Bearer {token}"})
        assert r.status_code < 500, (token[:10], r.text[:200])
    for path in ("/healthz", "/readyz", "/", "/ui", "/ui/", "/openapi.json"):
        r = await c.get(path, params={"x": "\u0000" * 10, "y": "a" * 5000}, headers={})
        assert r.status_code < 500, (path, r.text[:200])


async def test_a_fork_of_a_run_that_kept_no_content_says_so(
    c: httpx.AsyncClient, worker: WorkerProcess
) -> None:
    """Attack: fork a run submitted with storeContent false past its first answer, to read back
    what it did not keep. Refused (409) with a message that says why, naming no internal error
    (was ``restore_failed … KeyError: 'message'``)."""
    r = await c.post("/v1/runs", json={**run_body(), "runId": "hushed", "storeContent": False})
    assert r.status_code == 202, r.text
    view = await done(c, "hushed")
    assert view["result"]["contentRedacted"] is True, view
    r = await c.post("/v1/runs/hushed/fork", json={"atSeq": view["lastSeq"]})
    assert r.status_code == 409, r.text
    err = r.json()["error"]
    assert "storeContent" in err["message"] and "Error" not in err["message"], err
