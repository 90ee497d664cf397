"""The local batch server's Anthropic side (tests/support/message_batches.py) as Anthropic's official
client sees it: ``client.messages.batches`` create, retrieve, list, results and cancel, and the
Messages API it answers each request's params with."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from anthropic import AsyncAnthropic, BadRequestError, NotFoundError

from tests.support.batch_server import BatchServer, Plan, tool_rounds_backend

pytestmark = pytest.mark.timeout(30)

MODEL = "claude-test"


def _request(cid: str, results: int = 0) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "hi"}]
    for n in range(results):  # earlier tool rounds of the conversation
        messages += [
            {"role": "assistant", "content": [{"type": "tool_use", "id": f"toolu_{n}", "name": "calc", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"toolu_{n}", "content": "4"}]},
        ]  # fmt: skip
    params = {"model": MODEL, "max_tokens": 256, "messages": messages,
              "system": [{"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}],
              "tools": [{"name": "calc", "description": "adds", "input_schema": {"type": "object"}}]}  # fmt: skip
    return {"custom_id": cid, "params": params}


def _client(server: BatchServer) -> AsyncAnthropic:
    return AsyncAnthropic(base_url=server.base_url.removesuffix("/v1"), api_key="test", max_retries=0)


async def _until_ended(client: AsyncAnthropic, batch_id: str) -> Any:
    for _ in range(300):
        b = await client.messages.batches.retrieve(batch_id)
        if b.processing_status == "ended":
            return b
        await asyncio.sleep(0.02)
    raise AssertionError(f"batch {batch_id} did not end")


async def _results(client: AsyncAnthropic, batch_id: str) -> dict[str, Any]:
    return {r.custom_id: r.result async for r in await client.messages.batches.results(batch_id)}


async def test_the_official_client_creates_retrieves_lists_and_reads_results() -> None:
    async with BatchServer(tool_rounds_backend("calc", rounds=1), delay_s=0.1) as server:
        server.messages.cache_read_tokens = 4
        client = _client(server)
        created = await client.messages.batches.create(
            requests=[_request("r1-0"), _request("r2-0", results=1)]
        )  # type: ignore[list-item]
        assert created.processing_status == "in_progress" and created.results_url is None
        assert created.request_counts.processing == 2 and created.type == "message_batch"
        done = await _until_ended(client, created.id)
        assert done.ended_at is not None and done.results_url is not None
        assert (done.request_counts.succeeded, done.request_counts.processing) == (2, 0)
        got = await _results(client, created.id)
        assert set(got) == {"r1-0", "r2-0"}
        first, second = got["r1-0"], got["r2-0"]
        assert first.type == "succeeded" and second.type == "succeeded"
        assert first.message.stop_reason == "tool_use" and first.message.content[0].type == "tool_use"
        assert first.message.content[0].name == "calc" and first.message.content[0].input == {"n": 0}
        # the tool_result of the request went to the backend as a tool message: it answers in text
        assert second.message.stop_reason == "end_turn"
        assert second.message.content[0].text == "done after 1 tool results"
        assert first.message.usage.cache_read_input_tokens == 4 and first.message.usage.input_tokens == 7
        page = await client.messages.batches.list(limit=10)
        assert [b.id for b in page.data] == [created.id]
        assert server.received == {"r1-0": 1, "r2-0": 1}
        with pytest.raises(NotFoundError):
            await client.messages.batches.retrieve("msgbatch_nope")
        # the standard lane of the same provider: the Messages API, streamed
        async with client.messages.stream(**_request("s")["params"]) as stream:
            final = await stream.get_final_message()
        assert final.content[0].type == "tool_use" and final.usage.cache_read_input_tokens == 4
        await client.close()


async def test_requests_error_expire_and_a_batch_can_be_cancelled() -> None:
    plans = [
        Plan(outcome="failed"),
        Plan(outcome="expired", answered=1),
        Plan(fail_ids=frozenset({"c-0"})),
        Plan(delay_s=30),
    ]
    async with BatchServer(tool_rounds_backend("calc", rounds=0), delay_s=0.05, plans=plans) as server:
        client = _client(server)

        async def run(ids: list[str]) -> dict[str, Any]:
            b = await client.messages.batches.create(requests=[_request(i) for i in ids])  # type: ignore[misc]
            await _until_ended(client, b.id)
            return await _results(client, b.id)

        failed = await run(["a-0"])
        assert failed["a-0"].type == "errored" and failed["a-0"].error.error.type == "api_error"
        expired = await run(["b-0", "b-1"])
        assert (expired["b-0"].type, expired["b-1"].type) == ("succeeded", "expired")
        partial = await run(["c-0", "c-1"])
        assert (partial["c-0"].type, partial["c-1"].type) == ("errored", "succeeded")

        slow = await client.messages.batches.create(requests=[_request("d-0")])  # type: ignore[list-item]
        cancelling = await client.messages.batches.cancel(slow.id)
        assert cancelling.processing_status == "canceling" and cancelling.cancel_initiated_at is not None
        ended = await _until_ended(client, slow.id)
        assert ended.request_counts.canceled == 1
        assert (await _results(client, slow.id))["d-0"].type == "canceled"
        await client.close()


async def test_a_custom_id_anthropic_refuses_is_refused() -> None:
    async with BatchServer(tool_rounds_backend("calc", rounds=0)) as server:
        client = _client(server)
        for bad in (["run:1"], ["x-0", "x-0"]):
            with pytest.raises(BadRequestError):
                await client.messages.batches.create(requests=[_request(i) for i in bad])  # type: ignore[misc]
        assert not server.received
        await client.close()
