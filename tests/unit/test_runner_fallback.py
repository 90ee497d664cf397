"""A fallback chain through the effect runner on in-memory ports: the call the machine moved goes to
the chain's next provider, and its usage is costed at that provider's prices."""

from __future__ import annotations

from collections.abc import Callable

import httpx

from agentmill_client.models import RunStatus
from shared.profiles import AgentProfile, Pricing, RetryConfig
from shared.provider_config import ProviderConfig
from tests.peer import llama
from tests.unit.test_runner import World
from worker.adapters.limiter import OnWait
from worker.adapters.memory_store import MemoryModels
from worker.models.base import ModelProvider
from worker.models.openai import OpenAIProvider
from worker.models.scripted import ScriptedProvider
from worker.ports import Capacity

PRIMARY = ProviderConfig(kind="scripted", mode="script", name="primary",
                         pricing=Pricing(input_per_m_tok=1, output_per_m_tok=1))  # fmt: skip
BACKUP = ProviderConfig(kind="scripted", mode="script", name="backup", max_tokens=64,
                        pricing=Pricing(input_per_m_tok=1_000, output_per_m_tok=2_000))  # fmt: skip
CHAIN = AgentProfile(
    name="t",
    providers=[PRIMARY, BACKUP],
    fallback_on=["overloaded"],
    retry=RetryConfig(max_retries=2, base_delay_ms=1, max_delay_ms=1, jitter=0.0),
)


async def test_the_moved_call_goes_to_the_fallback_and_is_costed_at_its_prices() -> None:
    asked: list[str | None] = []

    def made(p: AgentProfile) -> ModelProvider:
        asked.append(p.provider.name)
        return ScriptedProvider(p.provider)

    w = World(
        [{"error": {"status": 529, "message": "Overloaded"}}, {"text": "from the backup"}], profile=CHAIN
    )
    w.models = MemoryModels(made)
    driver, _ = w.driver()
    assert await driver.run() == "completed"
    res = w.result()
    assert res.status == RunStatus.COMPLETED and res.final_assistant_message is not None
    assert res.final_assistant_message.content == "from the backup"
    assert asked[-2:] == ["primary", "backup"]  # the first attempt on the primary, the second on the backup
    moved = [p for p in w.run.payloads("status") if p["status"] == "model_fallback"]
    assert [(p["from"], p["to"], p["reason"]) for p in moved] == [("primary", "backup", "overloaded")]
    (usage,) = w.run.payloads("usage")
    assert usage["provider"] == "backup"
    u = usage["usage"]
    assert u["costUsd"] == BACKUP.pricing.cost_usd(u["inputTokens"], u["outputTokens"])  # type: ignore[union-attr]
    assert res.usage.cost_usd == u["costUsd"]


class Holding(MemoryModels):
    """Notes the endpoint each call takes pool-wide capacity on."""

    def __init__(self, make: Callable[[AgentProfile], ModelProvider]) -> None:
        super().__init__(make)
        self.endpoints: list[str | None] = []

    async def hold(self, cfg: ProviderConfig, tokens: int, on_wait: OnWait, priority: int) -> Capacity:
        self.endpoints.append(cfg.base_url)
        return await super().hold(cfg, tokens, on_wait, priority)


async def test_each_provider_takes_capacity_on_its_own_endpoint() -> None:
    chat = llama.load()["chat_stream"]

    def server(request: httpx.Request) -> httpx.Response:
        if request.url.host == "primary":
            return httpx.Response(529, json={"error": {"type": "overloaded_error", "message": "Overloaded"}})
        return httpx.Response(200, headers={"content-type": chat.content_type}, content=chat.body)

    limits = {"max_concurrent": 4, "requests_per_minute": 100}
    profile = AgentProfile(
        name="t",
        providers=[
            ProviderConfig(kind="openai", base_url="http://primary/v1", model="m", name="primary", **limits),
            ProviderConfig(kind="openai", base_url="http://backup/v1", model="m", name="backup", **limits),
        ],
        retry=RetryConfig(max_retries=2, base_delay_ms=1, max_delay_ms=1, jitter=0.0),
    )
    async with httpx.AsyncClient(transport=httpx.MockTransport(server)) as client:
        w = World([], profile=profile)
        w.models = models = Holding(lambda p: OpenAIProvider(p.provider, client))
        driver, _ = w.driver()
        assert await driver.run() == "completed"
    assert models.endpoints == ["http://primary/v1", "http://backup/v1"]
