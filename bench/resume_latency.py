"""Figure 5a's resumes: a run parked on a client tool call, or on a human approval, and the time from
the caller's answer (``Producer.post_tool_results``, ``Producer.settle_approval``: what the API's
``POST /v1/runs/{id}/tool-results`` and ``/approvals`` call) to the run's next event, on an idle pool.

Each sample submits a run that parks, waits until the worker is idle again (its poll interval twice,
and a margin: the worker back in its wake wait, as a pool whose caller took a while finds it), then
answers and times the next entry of the run's event stream."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson
from redis.asyncio import Redis

from agentmill_client.models import ClientToolResult
from bench.plumbing import ROOT
from producer.service import Producer
from shared.fields import RunField
from tests.support.schema import K

CLIENT = "scripted-client"  # the scripted profile, whose runs may declare the client tool `lookup`
LOOKUP = {
    "name": "lookup",
    "description": "Look a customer up in the caller's CRM.",
    "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
}


def resume_profiles() -> str:
    """A profile file holding ``CLIENT`` (the worker's and the producer's)."""
    path = ROOT / "bench" / "results" / "client-profiles.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    profile = {
        "name": CLIENT,
        "provider": {"kind": "scripted", "mode": "script"},
        "tools": ["echo"],
        "runClientTools": [LOOKUP["name"]],
    }
    path.write_bytes(orjson.dumps({"profiles": [profile]}))
    return str(path)


def _run(script: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {
        "agent": CLIENT,
        "inputMessages": [{"role": "user", "content": "bench"}],
        "runtimeHints": {"script": script},
        **extra,
    }


async def _parked(r: Redis, run_id: str, status: str, within: float = 10.0) -> bytes:
    """Until the run's status is ``status``: its stream's last entry id then."""
    deadline = time.monotonic() + within
    while await r.hget(K.run(run_id), RunField.STATUS) != status.encode():  # type: ignore[misc]
        if time.monotonic() > deadline:
            raise RuntimeError(f"run {run_id} did not reach {status} within {within} s")
        await asyncio.sleep(0.005)
    (last,) = await r.xrevrange(K.events(run_id), count=1)
    return bytes(last[0])


async def _next_event_ms(r: Redis, run_id: str, after: bytes, t0: float) -> float:
    got = await r.xread({K.events(run_id): after}, count=1, block=5000)
    if not got:
        raise RuntimeError(f"run {run_id}: no event within 5 s of its answer")
    return (time.perf_counter() - t0) * 1000


async def client_tool_latencies(r: Redis, p: Producer, n: int, idle_s: float) -> list[float]:
    """Client tool result posted → the run's next event (ms), ``n`` runs one after another."""
    script: list[dict[str, Any]] = [
        {"toolCalls": [{"name": "lookup", "arguments": {"q": "ACME"}}]},
        {"text": "ok"},
    ]
    out = []
    for _ in range(n):
        sub = await p.submit(_run(script, clientTools=[LOOKUP]))
        last = await _parked(r, sub.run_id, "awaiting_tools")
        rec = await p.get(sub.run_id)
        assert rec is not None
        results = [
            ClientToolResult(tool_call_id=c["toolCallId"], content="ACME: 12 open orders")
            for c in rec.pending_tool_calls
        ]
        await asyncio.sleep(idle_s)
        t0 = time.perf_counter()
        verdict, _, _ = await p.post_tool_results(sub.run_id, results)
        if verdict != "resumed":
            raise RuntimeError(f"tool results answered {verdict}")
        out.append(await _next_event_ms(r, sub.run_id, last, t0))
    return out


async def approval_latencies(r: Redis, p: Producer, n: int, idle_s: float) -> list[float]:
    """An approval (a ToolPolicy that requires it) → the run's next event (ms)."""
    script: list[dict[str, Any]] = [
        {"toolCalls": [{"name": "echo", "arguments": {"text": "x"}}]},
        {"text": "ok"},
    ]
    out = []
    for _ in range(n):
        sub = await p.submit(_run(script, toolPolicy={"requireApprovalByDefault": True}))
        last = await _parked(r, sub.run_id, "awaiting_human")
        raw = await r.hget(K.run(sub.run_id), RunField.APPROVALS)  # type: ignore[misc]
        calls = list(orjson.loads(raw or b"{}"))
        if not calls:
            raise RuntimeError("no approval pending")
        await asyncio.sleep(idle_s)
        t0 = time.perf_counter()
        for call in calls:
            await p.settle_approval(sub.run_id, call, approved=True)
        out.append(await _next_event_ms(r, sub.run_id, last, t0))
    return out
