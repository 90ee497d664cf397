"""The economy lane's price: a model's prices at its batch discount, in a call's cost and in the
worst case a budget holds for an economy run's call."""

from __future__ import annotations

import pytest

from agentmill_client.models import Message
from shared.prices import BATCH_DISCOUNT, Pricing
from tests.unit.machine_driver import config
from worker.machine import budget


def test_batch_prices_are_the_discount_times_every_price() -> None:
    p = Pricing.model_validate(
        {"inputPerMTok": 3, "outputPerMTok": 15, "cacheReadPerMTok": 0.3,
         "tiers": [{"aboveInputTokens": 200_000, "inputPerMTok": 6, "outputPerMTok": 22.5}]}
    )  # fmt: skip
    b = p.at_batch()
    assert BATCH_DISCOUNT == 0.5
    assert (b.input_per_m_tok, b.output_per_m_tok, b.cache_read_per_m_tok) == (1.5, 7.5, 0.15)
    assert (b.tiers[0].input_per_m_tok, b.tiers[0].output_per_m_tok) == (3.0, 11.25)
    assert b.cost_usd(1_000_000, 1_000_000) == pytest.approx(p.cost_usd(1_000_000, 1_000_000) / 2)
    own = Pricing(input_per_m_tok=1, output_per_m_tok=2, batch_discount=0.4).at_batch()
    assert (own.input_per_m_tok, own.output_per_m_tok) == (0.4, 0.8)
    assert own.at_batch() == own  # the batch price is not discounted again


def test_an_economy_runs_worst_case_is_at_the_batch_price() -> None:
    prices = Pricing(input_per_m_tok=10, output_per_m_tok=20)
    standard = config(pricing=prices)
    economy = config(pricing=prices, lane="economy", economy_links=[0])
    elsewhere = config(pricing=prices, lane="economy", economy_links=[])  # a provider the lane may not use
    msgs = [Message(role="user", content="x" * 4000)]
    cost = {name: budget.worst_case(c, msgs)[2] for name, c in
            (("standard", standard), ("economy", economy), ("elsewhere", elsewhere))}  # fmt: skip
    assert cost["economy"] == pytest.approx(cost["standard"] / 2)  # type: ignore[operator]
    assert cost["elsewhere"] == cost["standard"]
