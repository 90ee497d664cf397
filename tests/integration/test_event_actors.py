"""The run's own control events name who acted, as the audit log does: a scripted sequence on a real
Redis with a real worker (an abort by key A of a running run and of a scheduled one, an approval and
a rejection by key B, a client's tool result by a token of the token file, kept when its content is dropped, a retry by
key A) shows
each event's ``actor`` through ``GET /v1/runs/{id}/events`` and the SSE route."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import orjson
import pytest

from tests.integration.api_support import A, api, run_body, settings
from worker.process.jobs import WorkerProcess

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

# a tenant's agent with a client tool (the worker reads it from Redis)
CRM = {"name": "crm", "provider": {"connection": "scripted"}, "systemPrompt": "x",
       "clientTools": [{"name": "lookup", "parameters": {"type": "object"}}]}  # fmt: skip


async def status(c: httpx.AsyncClient, run_id: str, wanted: set[str]) -> dict[str, Any]:
    deadline = time.monotonic() + 20.0
    while True:
        view: dict[str, Any] = (await c.get(f"/v1/runs/{run_id}", headers=A)).json()
        if view.get("status") in wanted or time.monotonic() > deadline:
            assert view.get("status") in wanted, view
            return view
        await asyncio.sleep(0.05)


async def events(c: httpx.AsyncClient, run_id: str) -> list[dict[str, Any]]:
    page = await c.get(f"/v1/runs/{run_id}/events", params={"format": "json", "limit": 1000}, headers=A)
    got: list[dict[str, Any]] = page.json()["events"]
    return got


async def sse_events(c: httpx.AsyncClient, run_id: str) -> list[dict[str, Any]]:
    out = []
    async with c.stream("GET", f"/v1/runs/{run_id}/events", headers=A) as resp:
        assert resp.headers["content-type"].startswith("text/event-stream")
        async for line in resp.aiter_lines():
            if line.startswith("data: "):
                out.append(orjson.loads(line[6:]))
                if out[-1]["kind"] == "status" and out[-1]["payload"]["status"] in ("completed", "aborted"):
                    break
    return out


def actors_of(evs: list[dict[str, Any]], kind: str) -> list[Any]:
    return [e["payload"].get("actor") for e in evs if e["kind"] == kind]


async def test_each_control_event_names_its_actor(redis_url: str, worker: WorkerProcess) -> None:
    async with api(settings(redis_url)) as url, httpx.AsyncClient(base_url=url, timeout=20) as c:

        async def key(name: str, scopes: list[str]) -> tuple[dict[str, str], dict[str, str]]:
            made = (await c.post("/v1/keys", json={"scopes": scopes, "name": name}, headers=A)).json()
            return {"Authorization": f"Bearer {made['key']}"}, {
                "kind": "key",
                "id": made["keyId"],
                "name": name,
            }

        ka, alice = await key("alice", ["submit", "control", "read"])
        kb, bob = await key("bob", ["control", "read"])
        token_file = {"kind": "token-file", "id": "token-file", "name": ""}

        # an abort by key A: of a running run (its worker publishes the ending) and of a scheduled one
        slow = (
            await c.post("/v1/runs", json=run_body([{"text": "slow", "delayMs": 20_000}]), headers=ka)
        ).json()
        later = run_body(runAt="2099-01-01T00:00:00Z")
        parked = (await c.post("/v1/runs", json=later, headers=ka)).json()["runId"]
        await status(c, slow["runId"], {"running"})
        for rid in (slow["runId"], parked):
            assert (await c.post(f"/v1/runs/{rid}/abort", headers=ka)).status_code == 200
            await status(c, rid, {"aborted"})
            assert actors_of(await events(c, rid), "status")[-1] == alice
        assert actors_of(await sse_events(c, slow["runId"]), "status")[-1] == alice

        # an approval and a rejection by key B
        calls = [{"name": "echo", "arguments": {"text": "hi"}}, {"name": "echo", "arguments": {"text": "no"}}]
        gated = run_body(
            [{"toolCalls": calls}, {"text": "done"}], toolPolicy={"requireApprovalByDefault": True}
        )
        r1 = (await c.post("/v1/runs", json=gated, headers=A)).json()["runId"]
        pending = (await status(c, r1, {"awaiting_human"}))["pendingApprovals"]
        ok, no = sorted(p["toolCallId"] for p in pending)
        decisions = [
            {"toolCallId": ok, "approved": True},
            {"toolCallId": no, "approved": False, "reason": "nope"},
        ]
        r = await c.post(f"/v1/runs/{r1}/approvals", json={"decisions": decisions}, headers=kb)
        assert r.status_code == 200, r.text
        await status(c, r1, {"completed"})
        for evs in (await events(c, r1), await sse_events(c, r1)):
            said = [(e["payload"]["toolCallId"], e["payload"]["decision"], e["payload"].get("reason"),
                     e["payload"]["actor"]) for e in evs if e["kind"] == "approval"]  # fmt: skip
            assert sorted(said) == [(ok, "approved", None, bob), (no, "rejected", "nope", bob)], said

        # a client tool's result by a token of the token file
        assert (await c.post("/v1/agents", json=CRM, headers=A)).status_code == 201
        client = {
            **run_body([{"toolCalls": [{"name": "lookup", "arguments": {}}]}, {"text": "ok"}]),
            "agent": "crm",
            "storeContent": False,  # its content is dropped at its ending, not who sent its result
        }
        made = await c.post("/v1/runs", json=client, headers=A)
        assert made.status_code == 202, made.text
        r2 = made.json()["runId"]
        call = (await status(c, r2, {"awaiting_tools"}))["pendingToolCalls"][0]["toolCallId"]
        body = {"results": [{"toolCallId": call, "content": "page"}]}
        assert (await c.post(f"/v1/runs/{r2}/tool-results", json=body, headers=A)).status_code == 200
        await status(c, r2, {"completed"})
        for evs in (await events(c, r2), await sse_events(c, r2)):
            assert actors_of(evs, "tool_result") == [token_file], evs
            assert [e["payload"].get("contentRedacted") for e in evs if e["kind"] == "tool_result"] == [True]

        # a retry by key A: its first status event names it beside the run it retries
        retried = await c.post(f"/v1/runs/{slow['runId']}/retry", headers=ka)
        assert retried.status_code == 202, retried.text
        rid = retried.json()["runId"]
        await status(c, rid, {"running", "completed", "failed"})
        first = next(e for e in await events(c, rid) if e["kind"] == "status" and "retryOf" in e["payload"])
        assert first["payload"]["actor"] == alice and first["payload"]["retryOf"] == slow["runId"]
        assert (await c.post(f"/v1/runs/{rid}/abort", headers=A)).status_code == 200
        # what the audit log names for the same actions is the same actor
        page = (await c.get("/v1/audit", params={"target": r1}, headers=A)).json()["entries"]
        assert {(e["action"], e["actor"], e["actorName"]) for e in page if e["action"] == "approve"} == {
            ("approve", bob["id"], "bob")
        }
