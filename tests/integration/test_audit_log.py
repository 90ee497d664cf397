"""The audit log through the API on a real Redis with a real worker: a scripted sequence of control
actions (submit, approve, abort, retry, fork, schedule create and delete, agent create, point and
delete, key create and revoke) leaves exactly one entry each, in order, with the right actor (the key's id and name, or
token-file) and request id; filters and the cursor page it; no route writes it, and no other tenant
reads it."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pytest

from tests.integration.api_support import A, B, api, body, run_body, settings
from worker.process.jobs import WorkerProcess

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]


async def status(c: httpx.AsyncClient, run_id: str, wanted: set[str], h: dict[str, str]) -> dict[str, Any]:
    deadline = time.monotonic() + 20.0
    while True:
        view: dict[str, Any] = (await c.get(f"/v1/runs/{run_id}", headers=h)).json()
        if view.get("status") in wanted or time.monotonic() > deadline:
            assert view.get("status") in wanted, view
            return view
        await asyncio.sleep(0.05)


async def test_one_entry_per_control_action_with_its_actor(redis_url: str, worker: WorkerProcess) -> None:
    async with api(settings(redis_url)) as url, httpx.AsyncClient(base_url=url, timeout=20) as c:
        r = await c.post(
            "/v1/keys", json={"scopes": ["submit", "control", "read"], "name": "ops-bot"}, headers=A
        )
        key_id, key = r.json()["keyId"], r.json()["key"]
        k = {"Authorization": f"Bearer {key}", "X-Request-Id": "req-approve"}
        kh = {"Authorization": f"Bearer {key}"}
        gated = run_body([{"toolCalls": [{"name": "echo", "arguments": {"text": "hi"}}]}, {"text": "done"}],
                         toolPolicy={"requireApprovalByDefault": True})  # fmt: skip
        r1 = (await c.post("/v1/runs", json=gated, headers=kh)).json()["runId"]
        view = await status(c, r1, {"awaiting_human"}, kh)
        call = view["pendingApprovals"][0]["toolCallId"]
        r = await c.post(f"/v1/runs/{r1}/approvals", json={"decisions": [{"toolCallId": call, "approved": True}]},
                         headers=k)  # fmt: skip
        assert r.status_code == 200, r.text
        done = await status(c, r1, {"completed"}, kh)
        r2 = (
            await c.post("/v1/runs", json=run_body([{"text": "slow", "delayMs": 20_000}]), headers=A)
        ).json()["runId"]
        await status(c, r2, {"running"}, kh)
        assert (await c.post(f"/v1/runs/{r2}/abort", headers=kh)).json()["result"] in ("aborted", "requested")
        await status(c, r2, {"aborted"}, kh)
        retried = await c.post(f"/v1/runs/{r2}/retry", json={"from": "start"}, headers=kh)
        assert retried.status_code == 202, retried.text
        forked = await c.post(f"/v1/runs/{r1}/fork", json={"atSeq": done["lastSeq"]}, headers=kh)
        assert forked.status_code == 202, forked.text
        sched = {"scheduleId": "nightly", "cron": "0 3 * * *", "input": body()}
        assert (await c.post("/v1/schedules", json=sched, headers=kh)).status_code == 201
        assert (await c.delete("/v1/schedules/nightly", headers=kh)).status_code == 200
        agent = {"name": "helper", "provider": {"connection": "scripted"}, "systemPrompt": "x"}
        assert (await c.post("/v1/agents", json=agent, headers=A)).status_code == 201
        assert (
            await c.post("/v1/agents", json=agent, params={"current": "false"}, headers=A)
        ).status_code == 201
        ramp = {"ramp": {"version": 2, "percent": 25}}
        assert (await c.post("/v1/agents/helper/current", json=ramp, headers=A)).status_code == 200
        assert (await c.delete("/v1/agents/helper", headers=A)).status_code == 200
        assert (await c.delete(f"/v1/keys/{key_id}", headers=A)).json()["result"] == "revoked"
        # what was not an action leaves nothing: reads, a refused request, a repeated create
        assert (await c.get(f"/v1/runs/{r1}", headers=A)).status_code == 200
        assert (await c.post("/v1/runs/nope/abort", headers=A)).status_code == 404
        assert (
            await c.post("/v1/schedules", json={**sched, "scheduleId": "x", "cron": "bad"}, headers=A)
        ).status_code == 422
        assert (await c.post("/v1/agents/nope/current", json={"version": 1}, headers=A)).status_code == 404
        assert (await c.delete("/v1/agents/nope", headers=A)).status_code == 404

        page = (await c.get("/v1/audit", headers=A)).json()
        got = [(e["action"], e["target"], e["actor"], e["actorName"]) for e in page["entries"]]
        bot, boot = (key_id, "ops-bot"), ("token-file", "")
        assert got == [
            ("key_create", key_id, *boot),
            ("submit", r1, *bot),
            ("approve", r1, *bot),
            ("submit", r2, *boot),
            ("abort", r2, *bot),
            ("retry", r2, *bot),
            ("fork", r1, *bot),
            ("schedule_create", "nightly", *bot),
            ("schedule_delete", "nightly", *bot),
            ("agent_create", "helper", *boot),
            ("agent_create", "helper", *boot),
            ("agent_point", "helper", *boot),
            ("agent_delete", "helper", *boot),
            ("key_revoke", key_id, *boot),
        ], got
        details = [e["detail"] for e in page["entries"] if e["action"].startswith("agent_")]
        assert details == ["version=1 current=True", "version=2 current=False", "current=1 ramp=2@25%", ""], (
            details
        )
        entries = page["entries"]
        assert entries[2]["requestId"] == "req-approve" and all(e["requestId"] for e in entries)
        assert all(e["tenant"] == "tenant-a" for e in entries) and page["next"] is None
        assert [e["at"] for e in entries] == sorted(e["at"] for e in entries)

        # filters, a time range and the cursor
        only = (await c.get("/v1/audit", params={"action": "submit"}, headers=A)).json()["entries"]
        assert [e["target"] for e in only] == [r1, r2]
        about = (await c.get("/v1/audit", params={"target": r2}, headers=A)).json()["entries"]
        assert [e["action"] for e in about] == ["submit", "abort", "retry"]
        since = (await c.get("/v1/audit", params={"from": entries[5]["at"]}, headers=A)).json()["entries"]
        assert since[-9:] == entries[-9:] and len(since) <= 9 + 3
        seen, cursor = [], None
        while True:
            params: dict[str, Any] = {"limit": 3, **({"cursor": cursor} if cursor else {})}
            p = (await c.get("/v1/audit", params=params, headers=A)).json()
            seen += p["entries"]
            cursor = p["next"]
            if cursor is None:
                break
        assert seen == entries
        r = await c.get("/v1/audit", params={"cursor": "nope"}, headers=A)
        assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_cursor"

        # nobody writes it but the actions; another tenant sees none of it
        for method in ("POST", "PUT", "PATCH", "DELETE"):
            r = await c.request(method, "/v1/audit", json={"action": "abort"}, headers=A)
            assert r.status_code == 405, (method, r.status_code)
        assert (await c.get("/v1/audit", headers=B)).json()["entries"] == []
        r = await c.get("/v1/audit", params={"tenant": "tenant-a"}, headers=B)
        assert r.status_code == 403 and r.json()["error"]["code"] == "operator_required"
        # a key without admin cannot read it
        reader = (await c.post("/v1/keys", json={"scopes": ["read"]}, headers=A)).json()["key"]
        r = await c.get("/v1/audit", headers={"Authorization": f"Bearer {reader}"})
        assert r.status_code == 403 and "admin" in r.json()["error"]["message"]
        # the retry runs the slow script again: stopped, so the worker ends at once
        assert (await c.post(f"/v1/runs/{retried.json()['runId']}/abort", headers=A)).status_code == 200
