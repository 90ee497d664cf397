"""A tenant's day budget against text made to tokenize badly, with real worker processes and a
local OpenAI-compatible provider that counts four times what the old four-characters-a-token
estimate said (rare four-byte characters): a day of tokensPerDay 5,000 spent about 14,000 when
calls held that estimate; holding the prompt's UTF-8 bytes (policy.prompt_bound), it stays within
tokensPerDay."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from redis.asyncio import Redis

from shared.clock import now_ms, utc_day
from shared.fields import BudgetField
from tests.integration.helpers import producer_for, wait_all
from tests.support.fake_openai import FakeOpenAI, Reply
from tests.support.procs import workers
from tests.support.schema import K

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

PER_DAY = 5_000
RARE = "".join(chr(0x1D400 + i) for i in range(200))  # mathematical letters: four UTF-8 bytes each


def four_times_the_old_estimate(body: dict[str, Any]) -> tuple[int, int]:
    """What the attacked pool held for a prompt (4 a message + a token per 4 characters), times 4."""
    estimate = sum(4 + len(m.get("content") or "") // 4 for m in body["messages"])
    return 4 * estimate, 5


async def test_a_provider_counting_four_times_the_estimate_cannot_take_the_day_past_its_budget(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    fake = FakeOpenAI([Reply(text="ok", chunk_delay_s=0.05) for _ in range(40)],
                      usage_of=four_times_the_old_estimate)  # fmt: skip
    path = tmp_path / "profiles.json"
    async with fake:
        path.write_bytes(orjson.dumps({"profiles": [{"name": "wide", "provider": {
            "kind": "openai", "baseUrl": fake.base_url, "model": "fake-1", "maxTokens": 50}}]}))  # fmt: skip
        quotas = orjson.dumps({"default": {"tokensPerDay": PER_DAY}}).decode()
        env = {"AGENTMILL_PROFILES": str(path), "AGENTMILL_TENANT_QUOTAS": quotas}
        p = producer_for(redis, redis_url, profiles=str(path))
        runs = [
            {"agent": "wide", "inputMessages": [{"role": "user", "content": f"{i} {RARE}"}]}
            for i in range(40)
        ]
        subs = await p.submit_many(runs)
        with workers(redis_url, 2, env=env):
            recs = await wait_all(p, [s.run_id for s in subs], 90)  # type: ignore[union-attr]
    raw = await redis.hgetall(K.tenant_budget("default", utc_day(now_ms())))
    b = {k.decode(): int(v) for k, v in raw.items()}
    spent = b[BudgetField.SPENT_TOKENS]
    codes = {r.result.last_error.code for r in recs.values() if r.result and r.result.last_error}
    statuses = [r.status.value for r in recs.values()]
    assert codes == {"budget_exceeded"} and statuses.count("completed") >= 1, (statuses, codes)
    # Every call settled within its hold, so the day stays within its budget (docs/operations.md).
    assert spent <= PER_DAY, b
    assert b.get(BudgetField.OVERCOUNT) is None and b[BudgetField.HELD_TOKENS] == 0
