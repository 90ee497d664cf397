"""The local batch server (tests/support/batch_server.py) as OpenAI's official client sees it: the
economy lane's tests point agentmill at it, so it has to speak the protocol a real client speaks."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import orjson
import pytest

from tests.support.batch_server import BatchServer, Plan, tool_rounds_backend

if TYPE_CHECKING:
    from openai import AsyncOpenAI

pytestmark = pytest.mark.timeout(30)


def _client(base_url: str) -> AsyncOpenAI:
    # openai imported here, not at the top: ~1.2 s of CPU that every pytest process paid to collect
    from openai import AsyncOpenAI

    return AsyncOpenAI(base_url=base_url, api_key="test", max_retries=0)


def _jsonl(ids: list[str], messages: list[dict[str, Any]] | None = None) -> bytes:
    lines = [
        {
            "custom_id": cid,
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {"model": "gpt-4o-mini", "messages": messages or [{"role": "user", "content": "hi"}]},
        }
        for cid in ids
    ]
    return b"".join(orjson.dumps(line) + b"\n" for line in lines)


async def _until_done(client: AsyncOpenAI, batch_id: str) -> Any:
    for _ in range(300):
        b = await client.batches.retrieve(batch_id)
        if b.status in ("completed", "failed", "expired", "cancelled"):
            return b
        await asyncio.sleep(0.02)
    raise AssertionError(f"batch {batch_id} did not finish")


async def _results(client: AsyncOpenAI, file_id: str | None) -> dict[str, dict[str, Any]]:
    if file_id is None:
        return {}
    raw = (await client.files.content(file_id)).read()
    return {line["custom_id"]: line for line in map(orjson.loads, raw.splitlines())}


async def _submit(client: AsyncOpenAI, ids: list[str]) -> Any:
    f = await client.files.create(file=("requests.jsonl", _jsonl(ids)), purpose="batch")
    assert f.purpose == "batch" and f.bytes > 0
    return await client.batches.create(
        input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h", metadata={"pool": "t"}
    )


async def test_the_official_client_uploads_creates_polls_and_downloads() -> None:
    async with BatchServer(tool_rounds_backend("calc", rounds=1), delay_s=0.1) as server:
        client = _client(server.base_url)
        created = await _submit(client, ["r1:0", "r2:0"])
        assert created.status in ("validating", "in_progress") and created.request_counts is not None
        assert created.metadata == {"pool": "t"}
        done = await _until_done(client, created.id)
        assert done.status == "completed" and done.completed_at is not None
        assert done.request_counts is not None and done.request_counts.completed == 2
        out = await _results(client, done.output_file_id)
        assert set(out) == {"r1:0", "r2:0"} and done.error_file_id is None
        body = out["r1:0"]["response"]["body"]
        assert out["r1:0"]["response"]["status_code"] == 200 and body["object"] == "chat.completion"
        assert body["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "calc"
        assert body["usage"]["prompt_tokens"] == 11
        page = await client.batches.list(limit=10)
        assert [b.id for b in page.data] == [created.id]
        assert server.received == {"r1:0": 1, "r2:0": 1}
        from openai import NotFoundError

        with pytest.raises(NotFoundError):
            await client.batches.retrieve("batch-nope")
        await client.close()


async def test_a_batch_can_fail_expire_partly_answer_and_be_cancelled() -> None:
    plans = [
        Plan(outcome="failed"),
        Plan(outcome="expired", answered=1),
        Plan(fail_ids=frozenset({"c:0"})),
        Plan(delay_s=30),
    ]
    async with BatchServer(tool_rounds_backend("calc", rounds=0), delay_s=0.05, plans=plans) as server:
        client = _client(server.base_url)
        failed = await _until_done(client, (await _submit(client, ["a:0"])).id)
        assert failed.status == "failed" and failed.errors is not None and failed.errors.data
        assert failed.output_file_id is None and failed.error_file_id is None

        expired = await _until_done(client, (await _submit(client, ["b:0", "b:1"])).id)
        assert expired.status == "expired"
        assert set(await _results(client, expired.output_file_id)) == {"b:0"}
        errs = await _results(client, expired.error_file_id)
        assert errs["b:1"]["error"]["code"] == "batch_expired" and errs["b:1"]["response"] is None

        partial = await _until_done(client, (await _submit(client, ["c:0", "c:1"])).id)
        assert partial.status == "completed" and partial.request_counts is not None
        assert (partial.request_counts.completed, partial.request_counts.failed) == (1, 1)
        errs = await _results(client, partial.error_file_id)
        assert errs["c:0"]["response"]["status_code"] == 500
        out = await _results(client, partial.output_file_id)
        assert (
            out["c:1"]["response"]["body"]["choices"][0]["message"]["content"] == "done after 0 tool results"
        )

        slow = await _submit(client, ["d:0"])
        cancelling = await client.batches.cancel(slow.id)
        assert cancelling.status == "cancelling"
        cancelled = await _until_done(client, slow.id)
        assert cancelled.status == "cancelled"
        errs = await _results(client, cancelled.error_file_id)
        assert errs["d:0"]["error"]["code"] == "batch_cancelled"
        await client.close()


async def test_a_duplicate_custom_id_fails_the_batch_as_openai_does() -> None:
    async with BatchServer(tool_rounds_backend("calc", rounds=0)) as server:
        client = _client(server.base_url)
        done = await _until_done(client, (await _submit(client, ["x:0", "x:0"])).id)
        assert done.status == "failed" and done.errors is not None and done.errors.data
        assert done.errors.data[0].code == "duplicate_custom_id" and done.errors.data[0].line == 2
        await client.close()
