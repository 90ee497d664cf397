"""The economy batcher (worker/economy/) against a real Redis and the local batch server: requests
written once, closed into batches by size and age, sent, polled and delivered; a batcher dying at
each of its durable states leaves its successor (another holder, once the lease expired) to finish
without a request sent twice or lost."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import orjson
import pytest
from redis.asyncio import Redis

from shared import endpoint_keys
from shared.scripts import Scripts
from tests.support.batch_server import BatchServer, Plan, tool_rounds_backend
from worker.economy.batcher import MISSING, Batcher, BatcherConfig
from worker.economy.openai_batches import OpenAIBatches
from worker.economy.provider import BatchReply
from worker.economy.store import EconomyStore

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

ENDPOINT = "e0"
MODEL = "gpt-test"
FAST = BatcherConfig(batch_requests=10, batch_age_s=0.2, poll_min_s=0.02, poll_max_s=0.1, lease_ms=1000)


class Crash(Exception):
    """A batcher killed at a failpoint: nothing after it runs."""


def line(cid: str) -> bytes:
    body = {"model": MODEL, "messages": [{"role": "user", "content": cid}]}
    return orjson.dumps({"custom_id": cid, "method": "POST", "url": "/v1/chat/completions", "body": body})


def store_of(redis: Redis) -> EconomyStore:
    async def call_key(key: str, fn: Any) -> Any:
        return await fn(redis)

    return EconomyStore(Scripts(redis), call_key)


class Sink:
    def __init__(self) -> None:
        self.got: dict[str, BatchReply] = {}
        self.calls: Counter[str] = Counter()

    async def __call__(self, cid: str, reply: BatchReply) -> None:
        self.calls[cid] += 1
        self.got.setdefault(cid, reply)


async def drive(batcher: Batcher, until: Any, limit_s: float = 20.0) -> None:
    for _ in range(int(limit_s / 0.02)):
        await batcher.step()
        if until():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("the batcher did not get there")


async def test_requests_are_written_once_batched_by_size_and_age_and_delivered(redis: Redis) -> None:
    store = store_of(redis)
    assert [await store.enqueue(ENDPOINT, MODEL, f"r{i}:0", line(f"r{i}:0"), 100) for i in range(25)] == [
        1
    ] * 25
    assert await store.enqueue(ENDPOINT, MODEL, "r0:0", line("r0:0"), 100) == 0  # a run asking again
    assert await store.enqueue(ENDPOINT, MODEL, "full:0", line("full:0"), 25) == -1  # bounded
    async with BatchServer(tool_rounds_backend("calc", rounds=1), delay_s=0.05) as server:
        provider = OpenAIBatches(server.base_url, "k")
        sink = Sink()
        b = Batcher(store, ENDPOINT, [MODEL], provider, sink, "w1", FAST)
        await drive(b, lambda: len(sink.got) == 25)
        # two batches of ten at once, the last five once the oldest had waited batch_age_s
        assert sorted(x.total for x in server.batches.values()) == [5, 10, 10]
        assert server.received == {f"r{i}:0": 1 for i in range(25)}
        body = sink.got["r3:0"].body
        assert (
            body is not None and body["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "calc"
        )
        assert set(sink.calls.values()) == {1}
        assert await redis.hlen(endpoint_keys.economy_requests_key(ENDPOINT)) == 0  # delivered: gone
        assert await redis.zcard(endpoint_keys.economy_batches_key(ENDPOINT)) == 0
        await provider.aclose()


async def test_failed_expired_and_partial_batches_deliver_a_reason_for_each_request(redis: Redis) -> None:
    store = store_of(redis)
    plans = [Plan(outcome="failed"), Plan(outcome="expired", answered=1), Plan(fail_ids=frozenset({"c:1"}))]
    async with BatchServer(tool_rounds_backend("calc", rounds=0), plans=plans) as server:
        provider = OpenAIBatches(server.base_url, "k")
        sink = Sink()
        cfg = BatcherConfig(batch_requests=2, batch_age_s=60, poll_min_s=0.02, poll_max_s=0.05, lease_ms=1000)
        b = Batcher(store, ENDPOINT, [MODEL], provider, sink, "w1", cfg)
        for group in ("a", "b", "c"):
            for i in range(2):
                await store.enqueue(ENDPOINT, MODEL, f"{group}:{i}", line(f"{group}:{i}"), 100)
            await drive(b, lambda g=group: all(f"{g}:{i}" in sink.got for i in range(2)))  # type: ignore[misc]
        assert sink.got["a:0"].error.startswith("failed: ") and sink.got["a:1"].error == sink.got["a:0"].error
        assert sink.got["b:0"].body is not None and sink.got["b:1"].error == "expired"
        assert sink.got["c:0"].body is not None and sink.got["c:1"].error == "http 500"
        assert MISSING.startswith("missing")
        await provider.aclose()


@pytest.mark.parametrize(
    "point",
    [
        "economy_after_upload",
        "economy_after_creating",
        "economy_after_create",
        "economy_after_submitted",
        "economy_after_results",
        "economy_after_deliver",
    ],
)
async def test_a_batcher_killed_at_each_state_is_taken_over_exactly(redis: Redis, point: str) -> None:
    store = store_of(redis)
    ids = [f"k{i}:0" for i in range(20)]
    for cid in ids:
        await store.enqueue(ENDPOINT, MODEL, cid, line(cid), 100)
    async with BatchServer(tool_rounds_backend("calc", rounds=0), delay_s=0.05) as server:
        provider = OpenAIBatches(server.base_url, "k")
        sink = Sink()
        hits = Counter[str]()

        def hit(name: str) -> None:
            hits[name] += 1
            if name == point and hits[name] == 2:  # the second batch's (or answer's) step
                raise Crash(name)

        first = Batcher(store, ENDPOINT, [MODEL], provider, sink, "w1", FAST, hit=hit)
        with pytest.raises(Crash):
            await drive(first, lambda: False)
        # the dead holder's lease runs out; another worker's batcher finishes the work
        second = Batcher(store, ENDPOINT, [MODEL], provider, sink, "w2", FAST)
        assert not await second.step()  # not while the lease is the first one's
        await drive(second, lambda: len(sink.got) == len(ids))
        assert server.received == {cid: 1 for cid in ids}  # no request sent twice, none lost
        assert len(server.batches) == 2
        assert set(sink.got) == set(ids)
        assert await redis.zcard(endpoint_keys.economy_batches_key(ENDPOINT)) == 0
        await provider.aclose()


async def test_a_pass_longer_than_the_lease_keeps_it_against_a_competitor(redis: Redis) -> None:
    store = store_of(redis)
    ids = [f"s{i}:1" for i in range(5)]
    for cid in ids:
        await store.enqueue(ENDPOINT, MODEL, cid, line(cid), 100)
    async with BatchServer(tool_rounds_backend("calc", rounds=0)) as server:

        class Slow(OpenAIBatches):
            async def upload(self, lines: list[bytes], tag: str) -> str:
                await asyncio.sleep(2.5)  # longer than the 1 s lease
                return await super().upload(lines, tag)

        provider = Slow(server.base_url, "k")
        sink = Sink()
        one = Batcher(store, ENDPOINT, [MODEL], provider, sink, "w1", FAST)
        two = Batcher(store, ENDPOINT, [MODEL], provider, sink, "w2", FAST)

        async def compete() -> None:
            while len(sink.got) < len(ids):
                await two.step()
                await asyncio.sleep(0.05)

        rival = asyncio.create_task(compete())
        await drive(one, lambda: len(sink.got) == len(ids))
        await rival
        assert server.received == {cid: 1 for cid in ids} and len(server.batches) == 1
        assert one.delivered == len(ids) and two.delivered == 0  # the rival never took it over
        await provider.aclose()
