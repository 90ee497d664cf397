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
from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
import pytest

from tests.integration.api_support import A, B, api, run_body, settings, until_view
from worker.jobs import WorkerProcess

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
    assert r.status_code == 422, r.text
