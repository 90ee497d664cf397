"""Retry and fork with a real worker process, through the API: a run that failed after
three recorded HTTP-tool calls is retried and completes without executing any of them again (the
ledger counts every execution by Idempotency-Key); a fork at seq N of a completed run executes
nothing before N; lineage on GET and listings; another tenant's run is a 404."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from redis.asyncio import Redis

from tests.chaos.harness import chaos_profiles
from tests.integration.api_support import A, B, api, key, settings
from tests.support.ledger import Ledger
from tests.support.procs import WorkerProc
from tests.support.schema import K
from worker.core.preamble import unframe

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

FAST = {"AGENTMILL_LEASE_MS": "2000", "AGENTMILL_HEARTBEAT_MS": "300", "AGENTMILL_RECONCILE_MS": "300"}


def ledger_call(step: int) -> dict[str, Any]:
    return {"toolCalls": [{"name": "ledger", "arguments": {"step": step}}]}


def chaos_run(script: list[dict[str, Any]]) -> dict[str, Any]:
    return {"agent": "chaos", "inputMessages": [{"role": "user", "content": "go"}],
            "runtimeHints": {"script": script}}  # fmt: skip


async def ended(c: httpx.AsyncClient, run_id: str, within: float = 40.0) -> dict[str, Any]:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        r = await c.get(f"/v1/runs/{run_id}/wait", params={"timeout": 5}, headers=A)
        view: dict[str, Any] = r.json()
        if view["status"] in ("completed", "failed", "aborted"):
            return view
    raise AssertionError(f"run {run_id} did not end")


async def events(c: httpx.AsyncClient, run_id: str) -> list[dict[str, Any]]:
    out = []
    async with c.stream("GET", f"/v1/runs/{run_id}/events", headers=A) as r:
        async for line in r.aiter_lines():
            if line.startswith("data:"):
                ev = orjson.loads(line[5:])
                out.append(ev)
                if ev["kind"] == "status" and ev["payload"]["status"] in ("completed", "failed", "aborted"):
                    break
    return out


def tool_messages(view: dict[str, Any]) -> list[str]:
    """The tool results the model was given in its last call (the script's echoContext turn)."""
    seen = orjson.loads(view["result"]["finalAssistantMessage"]["content"])["messages"]
    return [orjson.loads(unframe(m["content"]))["recorded"] for m in seen if m["role"] == "tool"]


@pytest.fixture
def ledger() -> Any:
    with Ledger() as led:
        yield led


@pytest.fixture(params=["inline", "apart"])
async def pool(redis_url: str, tmp_path: Path, ledger: Ledger, request: pytest.FixtureRequest) -> Any:
    """The API in this process and one worker process, on the chaos profile (its ledger tool); the
    worker's checkpoints carry the configuration and the transcript, or leave them apart (the run hash's
    config field, the transcript key: AGENTMILL_CHECKPOINT_CONFIG and _TRANSCRIPT): a retry or fork
    reads the original's either way."""
    profiles = str(chaos_profiles(ledger.url, tmp_path / "profiles.json"))
    env = {**FAST, "AGENTMILL_PROFILES": profiles, "AGENTMILL_CHECKPOINT_CONFIG": request.param,
           "AGENTMILL_CHECKPOINT_TRANSCRIPT": request.param}  # fmt: skip
    worker = WorkerProc(redis_url, env=env).start()
    try:
        async with (
            api(settings(redis_url, profiles=profiles)) as url,
            httpx.AsyncClient(base_url=url, timeout=30) as c,
        ):
            yield c
    finally:
        worker.stop()


async def test_a_run_failed_after_three_recorded_tool_calls_is_retried_and_executes_none_again(
    pool: httpx.AsyncClient, ledger: Ledger, redis: Redis
) -> None:
    c = pool
    script = [ledger_call(1), ledger_call(2), ledger_call(3), {"error": {"status": 400, "message": "bad"}},
              {"echoContext": True}]  # fmt: skip
    rid = (await c.post("/v1/runs", json=chaos_run(script), headers=A)).json()["runId"]
    first = await ended(c, rid)
    assert first["status"] == "failed" and first["result"]["lastError"]["code"] == "model_http_400"
    before = ledger.counts()
    assert len(before) == 3 and set(before.values()) == {1}  # three calls, each executed once
    # Not another tenant's to retry or fork; a completed run is not retried.
    assert (await c.post(f"/v1/runs/{rid}/retry", headers=B)).status_code == 404
    assert (await c.post(f"/v1/runs/{rid}/fork", json={"atSeq": 3}, headers=B)).status_code == 404

    r = await c.post(f"/v1/runs/{rid}/retry", headers=A)
    assert r.status_code == 202, r.text
    retry = r.json()["runId"]
    assert retry != rid
    view = await ended(c, retry)
    assert view["status"] == "completed", view
    assert ledger.counts() == before  # 0 new executions of the three recorded calls (nor any other)
    assert tool_messages(view) == [
        f"{key(rid)}:c{i}.0" for i in (1, 2, 3)
    ]  # the model got the recorded results
    assert view["retryOf"] == rid
    assert (await c.get(f"/v1/runs/{rid}", headers=A)).json().get("retryOf") is None
    evs = await events(c, retry)
    by = {"kind": "token-file", "id": "token-file", "name": ""}  # who retried it
    assert evs[0]["payload"] == {"status": "running", "agent": "chaos", "retryOf": rid, "actor": by}
    assert not [e for e in evs if e["kind"] == "tool_call"]  # nothing was called again
    listed = {r["runId"]: r for r in (await c.get("/v1/runs", headers=A)).json()["runs"]}
    assert listed[retry]["retryOf"] == rid
    assert (await c.post(f"/v1/runs/{retry}/retry", headers=A)).json()["error"]["code"] == "not_retryable"

    # A fork of the retry at its first event starts where the retry's origin put it: with the three
    # results (their records copied again, for recall), executing nothing.
    body = {"atSeq": 1, "inputMessages": [{"role": "user", "content": "again?"}]}
    fork = (await c.post(f"/v1/runs/{retry}/fork", json=body, headers=A)).json()["runId"]
    fview = await ended(c, fork)
    assert fview["status"] == "completed" and tool_messages(fview) == tool_messages(view)
    assert ledger.counts() == before
    assert sorted(k.decode() for k in await redis.hkeys(K.tools(key(fork)))) == ["c1.0", "c2.0", "c3.0"]

    # From the start: a fresh run of the same input, which executes the three calls again (new keys).
    r = await c.post(f"/v1/runs/{rid}/retry", json={"from": "start"}, headers=A)
    again = await ended(c, r.json()["runId"])
    assert again["status"] == "failed" and again["retryOf"] == rid
    assert sum(ledger.counts().values()) == 6


async def test_a_fork_at_seq_n_of_a_completed_run_executes_nothing_before_n(
    pool: httpx.AsyncClient, ledger: Ledger
) -> None:
    c = pool
    script = [ledger_call(1), ledger_call(2), ledger_call(3), {"echoContext": True}]
    rid = (await c.post("/v1/runs", json=chaos_run(script), headers=A)).json()["runId"]
    assert (await ended(c, rid))["status"] == "completed"
    evs = await events(c, rid)
    n = next(e["seq"] for e in evs if e["kind"] == "tool_result" and e["payload"]["toolCallId"] == "c2.0")
    assert (await c.post(f"/v1/runs/{rid}/fork", json={"atSeq": 10_000}, headers=A)).status_code == 422
    # Past a stream id's range (schemathesis found a 500 here): refused with the field named.
    huge = await c.post(f"/v1/runs/{rid}/fork", json={"atSeq": 10**20}, headers=A)
    assert huge.status_code == 422 and "atSeq" in huge.text
    inside = next(e["seq"] for e in evs if e["kind"] == "tool_call" and e["payload"]["toolCallId"] == "c2.0")
    refused = await c.post(f"/v1/runs/{rid}/fork", json={"atSeq": inside, "inputMessages": [
        {"role": "user", "content": "x"}]}, headers=A)  # fmt: skip
    assert refused.status_code == 422 and "inside a tool round" in refused.text

    body = {"atSeq": n, "inputMessages": [{"role": "user", "content": "and step three?"}]}
    r = await c.post(f"/v1/runs/{rid}/fork", json=body, headers=A)
    assert r.status_code == 202, r.text
    fork = r.json()["runId"]
    view = await ended(c, fork)
    assert view["status"] == "completed", view
    assert (view["forkOf"], view["atSeq"]) == (rid, n)
    counts = ledger.counts()
    original, forked = key(rid), key(fork)  # the ids their keys (and Idempotency-Keys) use
    assert {k: v for k, v in counts.items() if k.startswith(original)} == {
        f"{original}:c{i}.0": 1 for i in (1, 2, 3)
    }
    # The fork executed only what came after seq N: the model's next call (step 3), under its own key.
    assert [k for k in counts if k.startswith(forked)] == [f"{forked}:c3.0"]
    assert len(counts) == 4
    assert tool_messages(view) == [f"{original}:c1.0", f"{original}:c2.0", f"{forked}:c3.0"]
    seen = orjson.loads(view["result"]["finalAssistantMessage"]["content"])["messages"]
    assert "and step three?" in [m.get("content") for m in seen if m["role"] == "user"]
