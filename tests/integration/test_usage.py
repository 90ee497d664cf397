"""Usage and cost per model call and run: the provider's usage when it sends one, else an
estimate marked ``estimated``; costUsd from the profile's pricing; a ``usage`` event after each model
call; the worker's token and cost counters by agent and model (real worker, Redis, OpenAI-compatible server)."""

from __future__ import annotations

from pathlib import Path

import pytest
from redis.asyncio import Redis

from tests.integration.helpers import run_with
from tests.support.fake_openai import FakeOpenAI, Reply
from tests.support.pricing import USER, cost

pytestmark = pytest.mark.integration


async def test_reported_usage_is_the_runs_usage_with_its_cost_and_an_event_after_each_call(
    redis: Redis, redis_url: str, priced: tuple[FakeOpenAI, Path]
) -> None:
    fake, path = priced
    fake.replies += [
        Reply(tool_calls=[("echo", {"text": "hi"})], usage=(100, 20)),
        Reply(text="done", usage=(150, 7)),
    ]
    rec, events = await run_with(redis, redis_url, path, USER)
    assert rec.status.value == "completed"  # type: ignore[attr-defined]
    usage = rec.result.usage  # type: ignore[attr-defined]
    assert (usage.input_tokens, usage.output_tokens, usage.estimated) == (250, 27, False)
    assert usage.cost_usd == pytest.approx(cost(250, 27))
    kinds = [e.kind for e in events]
    replies = [i for i, k in enumerate(kinds) if k == "assistant_message"]
    assert len(replies) == 2 and all(kinds[i + 1] == "usage" for i in replies)  # right after each call
    per_call = [e.payload for e in events if e.kind == "usage"]
    assert [(p["usage"]["inputTokens"], p["usage"]["outputTokens"]) for p in per_call] == [
        (100, 20),
        (150, 7),
    ]
    assert per_call[0]["usage"]["costUsd"] == pytest.approx(cost(100, 20))
    assert per_call[1]["total"]["inputTokens"] == 250 and per_call[1]["total"]["estimated"] is False
    assert per_call[1]["total"]["costUsd"] == pytest.approx(cost(250, 27))


async def test_without_a_usage_chunk_the_usage_is_estimated(
    redis: Redis, redis_url: str, priced: tuple[FakeOpenAI, Path]
) -> None:
    fake, path = priced
    fake.replies += [Reply(text="an answer of some length", usage=None)]
    rec, events = await run_with(redis, redis_url, path, USER)
    usage = rec.result.usage  # type: ignore[attr-defined]
    assert usage.estimated is True and usage.input_tokens > 0 and usage.output_tokens > 0
    assert usage.cost_usd == pytest.approx(cost(usage.input_tokens, usage.output_tokens))
    assert [e.payload["usage"]["estimated"] for e in events if e.kind == "usage"] == [True]
