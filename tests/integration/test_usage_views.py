"""Usage you can see: GET /v1/runs/{id} shows a run's usage so far while it runs (the
commit that publishes a ``usage`` event writes it to the run hash), and GET /v1/batches/{id} the
usage totals of a batch's ended runs, summed by the scripts that count the batch's ended runs, on
every partition. A real API, redis-server, worker and OpenAI-compatible server."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from redis.asyncio import Redis

from agentmill_client.api import BatchView, RunView
from shared import keys
from tests.integration.api_support import A, api, settings, until_batch, until_run
from tests.integration.helpers import running_worker
from tests.support.fake_openai import FakeOpenAI, Reply
from tests.support.pricing import USER, cost

pytestmark = pytest.mark.integration


async def test_a_running_run_shows_its_usage_so_far_and_its_total_once_ended(
    redis_url: str, priced: tuple[FakeOpenAI, Path]
) -> None:
    fake, path = priced
    fake.replies += [
        Reply(tool_calls=[("echo", {"text": "hi"})], usage=(100, 20)),
        Reply(text="done slowly", usage=(150, 7), chunk_delay_s=0.5),  # about 2 s of streaming
    ]
    s = settings(redis_url, profiles=str(path))
    async with api(s) as url, httpx.AsyncClient(base_url=url, headers=A) as c:
        r = await c.post("/v1/runs", json=USER)
        assert r.status_code == 202, r.text
        run_id = r.json()["runId"]
        async with running_worker(redis_url, profiles=str(path)):
            # While the second model call streams: the first call's usage, priced.
            mid = await until_run(c, run_id, lambda v: (v.get("usage") or {}).get("inputTokens", 0) > 0)
            assert mid["status"] == "running" and mid.get("result") is None
            assert mid["usage"]["inputTokens"] == 100 and mid["usage"]["outputTokens"] == 20
            assert mid["usage"]["estimated"] is False
            assert mid["usage"]["costUsd"] == pytest.approx(cost(100, 20))
            RunView.model_validate(mid)
            end = await until_run(c, run_id, lambda v: v["status"] == "completed")
    assert end["usage"] == end["result"]["usage"]
    assert (end["usage"]["inputTokens"], end["usage"]["outputTokens"]) == (250, 27)
    assert end["usage"]["costUsd"] == pytest.approx(cost(250, 27))


async def test_a_batch_over_partitions_sums_its_ended_runs_usage(
    redis_url: str, redis: Redis, priced: tuple[FakeOpenAI, Path]
) -> None:
    fake, path = priced
    n = 12
    # One reply a run (which run gets which does not change the sums).
    fake.replies += [Reply(text=f"answer {i}", usage=(10 + i, 1 + i)) for i in range(n)]
    want_in, want_out = sum(10 + i for i in range(n)), sum(1 + i for i in range(n))
    s = settings(redis_url, profiles=str(path), partitions=4)
    async with api(s) as url, httpx.AsyncClient(base_url=url, headers=A) as c:
        r = await c.post("/v1/runs/batch", json={"runs": [USER] * n, "batchId": "usage-b"})
        assert r.status_code == 200, r.text
        ids = [x["runId"] for x in r.json()["results"]]
        before = (await c.get("/v1/batches/usage-b")).json()
        zero = {
            "inputTokens": 0,
            "outputTokens": 0,
            "costUsd": None,
            "cacheReadTokens": 0,
            "cacheWriteTokens": 0,
        }
        assert before["usage"] == {"inputTokens": 0, "outputTokens": 0, "estimated": False, "costUsd": None,
                                   "cacheReadTokens": 0, "cacheWriteTokens": 0, "lane": None,
                                   "lanes": {"standard": zero, "economy": zero}}  # fmt: skip
        async with running_worker(redis_url, profiles=str(path), partitions=4):
            view = await until_batch(c, "usage-b", lambda v: v["finished"], within=30)
        assert view["finished"] and view["counts"]["completed"] == n, view
        runs = [(await c.get(f"/v1/runs/{i}")).json() for i in ids]
    shares = [await redis.exists(p.batch("tenant-a", "usage-b")) for p in keys.Layout(4).parts]
    assert sum(shares) > 1  # the batch spans partitions: its totals are the shares' sums
    usage = BatchView.model_validate(view).usage
    assert (usage.input_tokens, usage.output_tokens, usage.estimated) == (want_in, want_out, False)
    assert usage.cost_usd == pytest.approx(cost(want_in, want_out))
    assert usage.input_tokens == sum(x["result"]["usage"]["inputTokens"] for x in runs)
    assert usage.output_tokens == sum(x["result"]["usage"]["outputTokens"] for x in runs)
    standard, economy = usage.lanes["standard"], usage.lanes["economy"]  # no economy run: all standard
    assert (standard.input_tokens, standard.output_tokens, economy.input_tokens) == (want_in, want_out, 0)


async def test_a_run_ended_from_outside_keeps_its_usage_and_its_batch_counts_it(
    redis_url: str, priced: tuple[FakeOpenAI, Path]
) -> None:
    """Aborted while it waits for an approval: abort.lua ends it (finalize), not its worker; the
    usage of its one model call is in its result and in its batch's totals."""
    fake, path = priced
    fake.replies += [Reply(tool_calls=[("echo", {"text": "hi"})], usage=(70, 9))]
    s = settings(redis_url, profiles=str(path))
    body = {**USER, "toolPolicy": {"requireApprovalByDefault": True}}
    async with api(s) as url, httpx.AsyncClient(base_url=url, headers=A) as c:
        r = await c.post("/v1/runs/batch", json={"runs": [body], "batchId": "waits"})
        run_id = r.json()["results"][0]["runId"]
        async with running_worker(redis_url, profiles=str(path)):
            await until_run(c, run_id, lambda v: v["status"] == "awaiting_human")
        assert (await c.post(f"/v1/runs/{run_id}/abort")).json()["result"] == "aborted"
        end = (await c.get(f"/v1/runs/{run_id}")).json()
        batch = (await c.get("/v1/batches/waits")).json()
    assert end["status"] == "aborted"
    want = {"inputTokens": 70, "outputTokens": 9, "estimated": False, "costUsd": pytest.approx(cost(70, 9)),
            "cacheReadTokens": 0, "cacheWriteTokens": 0, "lane": None}  # fmt: skip
    assert end["result"]["usage"] == want and end["usage"] == want
    # ended from outside its worker: the standard lane's
    lane = {
        k: want[k] for k in ("inputTokens", "outputTokens", "costUsd", "cacheReadTokens", "cacheWriteTokens")
    }
    none = {"inputTokens": 0, "outputTokens": 0, "costUsd": 0.0, "cacheReadTokens": 0, "cacheWriteTokens": 0}
    assert batch["finished"] and batch["usage"] == {**want, "lanes": {"standard": lane, "economy": none}}
