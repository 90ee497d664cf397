"""Fallback chains and shape fallbacks through real workers and Redis: a primary answering 529 (a
fault-injecting proxy in front of the recorded llama.cpp server), runs completing on the fallback,
a worker SIGKILLed mid-fallback whose run resumes there, and a responseFormat run against the
recorded llama-cpp-python server completing with no setting."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from redis.asyncio import Redis

from shared.profiles import load_profiles
from tests.integration.helpers import (
    assert_clean_stream,
    metric_samples,
    producer_for,
    running_worker,
    stream,
    wait_all,
)
from tests.peer import llama
from tests.support.fake_openai import FakeOpenAI, Reply
from tests.support.fault_proxy import FaultProxy
from tests.support.ledger import Ledger
from tests.support.llama_replay import LlamaReplay
from tests.support.procs import WorkerProc

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

MODEL = "gemma-3-270m"
USER = [{"role": "user", "content": "Name a colour."}]
LEDGER_TOOL = {
    "name": "ledger",
    "description": "Record a step in the ledger.",
    "parameters": {"type": "object", "properties": {"step": {"type": "integer"}}, "required": ["step"]},
    "allowHosts": ["127.0.0.1"],
}


def chain_profile(path: Path, primary: str, backup: str, **extra: Any) -> Path:
    doc = {"profiles": [{
        "name": "chain",
        "providers": [
            {"name": "primary", "kind": "openai", "baseUrl": primary, "model": MODEL, "temperature": 0.0,
             "maxTokens": 48},
            {"name": "backup", "kind": "openai", "baseUrl": backup, "model": MODEL, "temperature": 0.0,
             "maxTokens": 48},
        ],
        "fallbackOn": ["overloaded"],
        "retry": {"baseDelayMs": 50, "maxDelayMs": 200},
        **extra,
    }]}  # fmt: skip
    path.write_bytes(orjson.dumps(doc))
    load_profiles(str(path))
    return path


def recorded_text(name: str) -> str:
    text = []
    for line in llama.load()[name].body.split(b"\n"):
        if line.startswith(b"data: {"):
            for c in orjson.loads(line[6:]).get("choices") or []:
                text.append((c.get("delta") or {}).get("content") or "")
    return "".join(text)


def statuses(events: list[Any], status: str) -> list[dict[str, Any]]:
    return [e.payload for e in events if e.kind == "status" and e.payload.get("status") == status]


async def test_runs_complete_on_the_fallback_while_the_primary_answers_529(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    async with LlamaReplay() as peer, FaultProxy(peer.base_url) as proxy:
        path = chain_profile(tmp_path / "profiles.json", proxy.base_url, peer.base_url)
        p = producer_for(redis, redis_url)
        p.profiles = load_profiles(str(path))
        subs = [await p.submit({"agent": "chain", "inputMessages": USER}) for _ in range(3)]
        ids = [s.run_id for s in subs]
        async with running_worker(redis_url, profiles=str(path)) as wp:
            recs = await wait_all(p, ids, 30)
            metrics = metric_samples(wp.metrics.render().decode())
    answer = recorded_text("chat_stream")
    for run_id in ids:
        rec = recs[run_id]
        assert rec.status.value == "completed", rec.result  # type: ignore[union-attr]
        assert rec.result.final_assistant_message.content == answer  # type: ignore[union-attr]
        events = await stream(redis, run_id)
        assert_clean_stream(events)
        (moved,) = statuses(events, "model_fallback")
        assert (moved["from"], moved["to"], moved["reason"]) == ("primary", "backup", "overloaded")
        usage = [e.payload for e in events if e.kind == "usage"]
        assert [(u["provider"], u["model"]) for u in usage] == [("backup", MODEL)]
        assert not statuses(events, "retrying")  # overloaded moves on at once
    assert proxy.requests == proxy.faulted == 3  # one attempt on the primary per call
    assert len(peer.requests) == 3  # each call answered once, by the fallback
    labels = (("agent", "chain"), ("from", "primary"), ("reason", "overloaded"), ("to", "backup"))
    assert metrics[("agentmill_model_fallbacks_total", labels)] == 3
    quiet = (("agent", "chain"), ("from", "primary"), ("reason", "timeout"), ("to", "backup"))
    assert metrics[("agentmill_model_fallbacks_total", quiet)] == 0


async def test_a_worker_killed_mid_fallback_resumes_on_the_fallback_and_never_calls_the_primary_again(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    backup = FakeOpenAI([
        Reply(tool_calls=[("ledger", {"step": 1})], chunk_delay_s=0.0, pieces=1),
        Reply(text="a long answer streamed slowly, " * 8, chunk_delay_s=0.15, pieces=16),  # the worker dies in it
        Reply(text="done", chunk_delay_s=0.0, pieces=1),
    ])  # fmt: skip
    fast = {"AGENTMILL_LEASE_MS": "1500", "AGENTMILL_HEARTBEAT_MS": "300", "AGENTMILL_RECONCILE_MS": "300",
            "AGENTMILL_DELTA_FLUSH_MS": "200"}  # fmt: skip
    with Ledger() as ledger:
        async with backup, FaultProxy(backup.base_url) as proxy:
            path = chain_profile(tmp_path / "profiles.json", proxy.base_url, backup.base_url,
                                 httpTools=[LEDGER_TOOL | {"url": ledger.url}],
                                 toolSettings={"ledger": {"timeoutS": 10}})  # fmt: skip
            env = {**fast, "AGENTMILL_PROFILES": str(path)}
            p = producer_for(redis, redis_url, profiles=str(path))
            sub = await p.submit({"agent": "chain", "inputMessages": USER})
            doomed = WorkerProc(
                redis_url, env={**env, "AGENTMILL_FAILPOINTS": "after_delta_publish:1"}
            ).start()
            try:
                await until(lambda: not doomed.alive, 30, "the worker never reached after_delta_publish")
                assert proxy.requests == 2  # the first call's and the second's, each moved on
                assert len(backup.requests) == 2
                rescuer = WorkerProc(redis_url, env=env).start()
                try:
                    rec = (await wait_all(p, [sub.run_id], 30))[sub.run_id]
                finally:
                    rescuer.stop()
            finally:
                doomed.stop()
            assert rec.status.value == "completed", rec.result  # type: ignore[union-attr]
            assert rec.result.final_assistant_message.content == "done"  # type: ignore[union-attr]
            assert proxy.requests == 2  # the resumed call went to the fallback: the primary was not asked
            assert len(backup.requests) == 3
        counts = ledger.counts()
    events = await stream(redis, sub.run_id)
    assert_clean_stream(events)
    assert list(counts.values()) == [1]  # the recorded tool call was not executed again
    assert len(statuses(events, "model_fallback")) == 2  # none for the resumed call
    assert len(statuses(events, "model_call_restarted")) == 1


async def test_a_structured_run_on_llama_cpp_python_completes_with_no_setting(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    async with LlamaReplay() as peer:
        path = tmp_path / "profiles.json"
        path.write_bytes(orjson.dumps({"profiles": [{"name": "gpt", "provider": {
            "kind": "openai", "baseUrl": peer.base_url, "model": MODEL, "temperature": 0.0, "maxTokens": 96}}]}))  # fmt: skip
        fmt = {"type": "json_schema", "jsonSchema": {"name": "pick", "schema": llama.PICK}}
        p = producer_for(redis, redis_url)
        p.profiles = load_profiles(str(path))
        ids = []
        async with running_worker(redis_url, profiles=str(path)) as wp:
            for _ in range(2):
                sub = await p.submit({"agent": "gpt", "inputMessages": USER, "responseFormat": fmt})
                ids.append(sub.run_id)
                rec = (await wait_all(p, [sub.run_id], 20))[sub.run_id]
                assert rec.status.value == "completed", rec.result  # type: ignore[union-attr]
                assert set(rec.result.output) == {"colour", "sure"}  # type: ignore[union-attr]
            metrics = metric_samples(wp.metrics.render().decode())
    # the first call was refused once and sent again as json_object; the second run went so at once
    assert [r["response_format"]["type"] for r in peer.requests] == [
        "json_schema",
        "json_object",
        "json_object",
    ]
    assert metrics[("agentmill_provider_shape_fallbacks_total", (("shape", "response_format"),))] == 1
    for run_id in ids:
        events = await stream(redis, run_id)
        assert_clean_stream(events)
        assert not [e for e in events if e.kind == "error"]


async def until(check: Any, within: float, what: str) -> None:
    deadline = time.monotonic() + within
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(what)
        await asyncio.sleep(0.05)
