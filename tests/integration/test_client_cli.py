"""The Python client across an API restart, and the CLI (tail, submit, status, demo)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import uvicorn
from redis.asyncio import Redis

from agentmill_client.client import ApiError, AsyncClient, Client
from app.api import create_app
from producer.api import serve
from shared.settings import Settings
from tests.integration.helpers import producer_for, running_worker, script_run, stream, until_status, wait_all
from tests.support import forkserver
from tests.support.cli import ROOT, cli
from tests.support.redis_server import free_port
from tests.support.schema import K
from worker.process.jobs import WorkerProcess

pytestmark = pytest.mark.integration


def api_server(redis_url: str, port: int, **settings: Any) -> uvicorn.Server:
    """The API as `agentmill api` serves it (its streams end when it stops), on ``port``."""
    s = Settings(redis_url=redis_url, **{"auth_disabled": True, **settings})
    return serve.api_server(create_app(s), s, host="127.0.0.1", port=port, log_level="error")


class StreamCount(httpx.AsyncHTTPTransport):
    """The client's transport, counting the event streams it opens."""

    def __init__(self) -> None:
        super().__init__()
        self.streams = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.streams += request.url.path.endswith("/events")
        return await super().handle_async_request(request)


async def test_events_survive_an_api_restart_and_yield_every_seq_once(redis_url: str) -> None:
    """The API stopped mid-stream ends its open stream at once (``closing``), without the
    terminal event, and the client resumes on the next API: two streams. (A server that waits for
    the stream instead sends every event before it stops: one stream, and the client's next call
    races the next API's start-up; that is how this test once failed in Functions mode only.)"""
    port = free_port()
    server = api_server(redis_url, port)
    task = asyncio.create_task(server.serve())
    wp = WorkerProcess(Settings(redis_url=redis_url, poll_delay_s=0.02, worker_metrics_port=-1))
    wtask = asyncio.create_task(wp.run())
    try:
        while not server.started:
            await asyncio.sleep(0.01)
        script = [
            {
                "text": f"step {i} " * 3,
                "delayMs": 250,
                "toolCalls": [{"name": "echo", "arguments": {"text": str(i)}}],
            }
            for i in range(6)
        ]
        transport = StreamCount()
        async with AsyncClient(f"http://127.0.0.1:{port}", transport=transport) as c:
            run_id = (await c.submit(script_run(script))).run_id
            seen: list[int] = []
            restarted = False
            async for e in c.events(run_id):
                seen.append(e.seq)
                if len(seen) == 4 and not restarted:  # take the API down mid-stream and bring it back
                    restarted = True
                    server.should_exit = True
                    await task
                    await asyncio.sleep(0.5)
                    server = api_server(redis_url, port)
                    task = asyncio.create_task(server.serve())
            view = await c.get(run_id)
        assert restarted and view.status == "completed"
        assert view.result is not None and view.result.final_assistant_message is not None
        assert seen == list(range(1, view.last_seq + 1))
        assert transport.streams == 2  # the first ended at the restart, not after the run
    finally:
        wp.request_stop()
        server.should_exit = True
        await asyncio.gather(wtask, task, return_exceptions=True)


def test_sync_client_round_trip(redis_url: str) -> None:
    import threading

    port = free_port()
    server = api_server(redis_url, port)
    t = threading.Thread(target=lambda: asyncio.run(server.serve()), daemon=True)
    t.start()
    try:
        while not server.started:
            pass
        with Client(f"http://127.0.0.1:{port}") as c:
            sub = c.submit(script_run([{"text": "x"}]), idempotency_key="k1")
            assert c.submit(script_run([{"text": "x"}]), idempotency_key="k1").run_id == sub.run_id
            assert c.get(sub.run_id).status == "queued"
            assert c.abort(sub.run_id).result == "aborted"
            assert [e.payload["status"] for e in c.events(sub.run_id)] == ["aborted"]
            items = c.submit_batch([script_run([{"text": "y"}]), {"inputMessages": []}])
            assert items[0].run_id and items[0].error is None
            assert items[1].run_id is None and items[1].error is not None
            assert items[1].error.field == "runs.1.inputMessages"
            with pytest.raises(ApiError) as err:
                c.approve(sub.run_id, "nope")
            assert err.value.status == 409 and err.value.code == "not_awaiting_approval"
    finally:
        server.should_exit = True
        t.join(10)


async def test_cli_tail_status_submit(redis: Redis, redis_url: str, tmp_path: Path) -> None:
    p = producer_for(redis, redis_url)
    sub = await p.submit(
        script_run([{"toolCalls": [{"name": "echo", "arguments": {"text": "hey"}}]}, {"text": "bye"}])
    )
    wp = WorkerProcess(Settings(redis_url=redis_url, poll_delay_s=0.02, worker_metrics_port=-1))
    wtask = asyncio.create_task(wp.run())
    try:
        await wait_all(p, [sub.run_id], 10)
        out = await asyncio.to_thread(cli, redis_url, "tail", sub.run_id)
        assert out.returncode == 0, out.stderr
        assert "echo" in out.stdout and "assistant: bye" in out.stdout and "completed" in out.stdout
        resumed = await asyncio.to_thread(cli, redis_url, "tail", sub.run_id, "--after", "5")
        assert resumed.returncode == 0 and "echo(" not in resumed.stdout and "completed" in resumed.stdout
        missing = await asyncio.to_thread(cli, redis_url, "tail", "no-such-run")
        assert missing.returncode == 2 and "no run no-such-run" in missing.stderr
        status = await asyncio.to_thread(cli, redis_url, "status", sub.run_id)
        assert status.returncode == 0 and '"completed"' in status.stdout
        jsonl = tmp_path / "runs.jsonl"
        jsonl.write_text(
            "\n".join(
                [
                    orjson.dumps(script_run([{"text": "a"}])).decode(),
                    '{"inputMessages": []}',
                    orjson.dumps(script_run([{"text": "b"}])).decode(),
                ]
            )
        )
        # Two runs a batch: the file goes in two batches and errors keep their place in the file.
        small = {"AGENTMILL_MAX_BATCH": "2"}
        bad = await asyncio.to_thread(cli, redis_url, "submit", str(jsonl), "--wait", env=small)
        assert bad.returncode == 1 and "line 2:" in bad.stderr and "accepted 2, rejected 1" in bad.stderr
        assert len(bad.stdout.split()) == 3  # the batch id, then the two runs
        jsonl.write_text(orjson.dumps(script_run([{"text": "c"}])).decode() + "\n")
        good = await asyncio.to_thread(cli, redis_url, "submit", str(jsonl), "--wait")
        assert good.returncode == 0, good.stdout + good.stderr
    finally:
        wp.request_stop()
        await wtask


def test_cli_demo_runs_to_completion() -> None:
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    # `agentmill demo` through the fork server (tests/support/forkserver.py), without a fresh
    # interpreter's imports; the demo starts its own redis-server, API and worker as it would anyway
    out = forkserver.run(["-m", "app.cli", "demo", "--runs", "20"], cwd=ROOT, env={**env, "COLUMNS": "200"},
                         timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    assert (
        "20 / 20" in out.stdout
        and "The answer is" in out.stdout
        and "completed after 2 iterations" in out.stdout
    )


async def test_cli_approve_reject_and_abort(redis: Redis, redis_url: str) -> None:
    p = producer_for(redis, redis_url)
    calls = [
        {"id": "ok-1", "name": "echo", "arguments": {"text": "yes"}},
        {"id": "no-1", "name": "echo", "arguments": {"text": "no"}},
    ]
    parked = await p.submit(
        script_run([{"toolCalls": calls}, {"text": "done"}], toolPolicy={"requireApprovalByDefault": True})
    )
    queued = await p.submit(script_run([{"text": "never"}]))
    # No worker yet: the queued run is aborted before it starts.
    out = await asyncio.to_thread(cli, redis_url, "abort", queued.run_id)
    assert out.returncode == 0 and "aborted" in out.stdout
    async with running_worker(redis_url):
        await until_status(redis, parked.run_id, "awaiting_human")
        approve = await asyncio.to_thread(cli, redis_url, "approve", parked.run_id, "c1.0")
        assert approve.returncode == 0 and "recorded" in approve.stdout, approve.stdout + approve.stderr
        unknown = await asyncio.to_thread(cli, redis_url, "approve", parked.run_id, "nope")
        assert unknown.returncode == 2
        reject = await asyncio.to_thread(
            cli, redis_url, "reject", parked.run_id, "c1.1", "--reason", "not today"
        )
        assert reject.returncode == 0 and "resumed" in reject.stdout
        again = await asyncio.to_thread(cli, redis_url, "approve", parked.run_id, "c1.1")
        assert again.returncode == 2  # decided already: a clear refusal, not a second execution
        recs = await wait_all(p, [parked.run_id, queued.run_id], 15)
    assert recs[parked.run_id].status.value == "completed"
    assert recs[queued.run_id].status.value == "aborted"
    results = [e for e in await stream(redis, parked.run_id) if e.kind == "tool_result"]
    assert sorted((e.payload["toolCallId"], e.payload["isError"]) for e in results) == [
        ("c1.0", False),
        ("c1.1", True),  # rejected: an error result the model sees, never executed
    ]
    records = {k.decode(): orjson.loads(v) for k, v in (await redis.hgetall(K.tools(parked.run_id))).items()}
    assert list(records) == ["c1.0"] and records["c1.0"]["attempts"] == 1  # executed once; c1.1 never
    finished = await asyncio.to_thread(cli, redis_url, "abort", parked.run_id)
    assert finished.returncode == 0 and "already finished" in finished.stdout
    missing = await asyncio.to_thread(cli, redis_url, "abort", "no-such-run")
    assert missing.returncode == 2 and "error: no run no-such-run" in missing.stderr and not missing.stdout
