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
