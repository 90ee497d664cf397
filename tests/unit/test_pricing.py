"""Prices: the table's (genai-prices' bundled snapshot, offline) and a profile's own, and their
arithmetic with cache reads and writes: agentmill's cost of a usage equals the table's own
``calc_price`` to the nano-USD, a budget's worst case is never below a call's actual cost, and an
unknown model is unpriced (None, warned once), never 0."""

from __future__ import annotations

import logging
import socket
from typing import Any

import pytest
from genai_prices import Usage as TableUsage
from genai_prices import calc_price
from hypothesis import given, settings
from hypothesis import strategies as st

from agentmill_client.models import Message, Usage
from shared import price_table
from shared.price_table import table_pricing
from shared.prices import Pricing, round_usd
from shared.provider_config import ProviderConfig
from worker.core import policy
from worker.models.scripted import MIN_CACHE_TOKENS, cache_usage

# (kind, model, baseUrl) as profiles name them, and the table's lookup of the same
MODELS: list[tuple[str, str, str | None, dict[str, Any]]] = [
    ("anthropic", "claude-sonnet-4-5", None, {"provider_id": "anthropic"}),  # a long-context tier above 200k
    ("anthropic", "claude-3-5-haiku-latest", None, {"provider_id": "anthropic"}),
    ("openai", "gpt-4o", None, {"provider_id": "openai"}),  # cache reads, no cache-write price
    ("openai", "gpt-4o-mini", "https://api.openai.com/v1", {"provider_api_url": "https://api.openai.com/v1"}),
    ("scripted", "claude-opus-4-1", None, {}),
]


def usages() -> st.SearchStrategy[tuple[int, int, int, int]]:
    """(input, output, cache reads, cache writes), reads and writes parts of the input."""

    def split(inp: int) -> st.SearchStrategy[tuple[int, int, int, int]]:
        return st.tuples(st.just(inp), st.integers(0, 64_000), st.integers(0, inp)).flatmap(
            lambda t: st.tuples(st.just(t[0]), st.just(t[1]), st.just(t[2]), st.integers(0, t[0] - t[2]))
        )

    return st.one_of(st.integers(0, 8_000), st.integers(150_000, 1_000_000)).flatmap(split)


@pytest.mark.parametrize("kind, model, base_url, where", MODELS)
@settings(max_examples=60, deadline=None)
@given(u=usages())
def test_the_cost_of_a_usage_equals_the_tables_own_calculation(
    kind: str, model: str, base_url: str | None, where: dict[str, Any], u: tuple[int, int, int, int]
) -> None:
    inp, out, read, write = u
    pricing = table_pricing(kind, model, base_url)
    assert pricing is not None
    theirs = calc_price(
        TableUsage(input_tokens=inp, output_tokens=out, cache_read_tokens=read, cache_write_tokens=write),
        model,
        **where,
    ).total_price
    assert pricing.cost_usd(inp, out, read, write) == round_usd(theirs)
    # and the worst case a budget holds for the prompt never falls short of what it costs
    assert pricing.worst_case_usd(inp, out) >= pricing.cost_usd(inp, out, read, write)


def test_a_cached_prompt_costs_a_tenth_and_a_write_a_quarter_more() -> None:
    p = table_pricing("anthropic", "claude-sonnet-4-5", None)
    assert p is not None
    assert p.cost_usd(100_000, 0) == 0.3
    assert p.cost_usd(100_000, 0, cache_read_tokens=100_000) == 0.03
    assert p.cost_usd(100_000, 0, cache_write_tokens=100_000) == 0.375
    assert p.worst_case_usd(100_000, 0) == 0.375  # every token maybe written to the cache
    assert p.cost_usd(1_000_000, 0) == 6.0  # past 200k input: the long-context tier, for every token
    assert p.worst_case_usd(1_000_000, 0) == 7.5


def test_a_profiles_own_pricing_overrides_the_table_and_prices_cache_tokens() -> None:
    own = Pricing(input_per_m_tok=1, output_per_m_tok=2, cache_read_per_m_tok=0.1, cache_write_per_m_tok=1.5)
    cfg = ProviderConfig(kind="openai", model="gpt-4o", pricing=own)
    assert cfg.prices() is own
    assert own.cost_usd(1000, 100, 600, 300) == round((100 * 1 + 600 * 0.1 + 300 * 1.5 + 100 * 2) / 1e6, 9)
    # without cache prices a cached token costs the input price (never less than the provider charges)
    plain = Pricing(input_per_m_tok=1, output_per_m_tok=2)
    assert plain.cost_usd(1000, 100, 600, 300) == plain.cost_usd(1000, 100)
    wire = ProviderConfig.model_validate(
        {
            "kind": "openai",
            "model": "m",
            "pricing": {"inputPerMTok": 1, "outputPerMTok": 2, "cacheReadPerMTok": 0.5},
        }
    )
    assert wire.pricing is not None and wire.pricing.cache_read_per_m_tok == 0.5


def test_an_unknown_model_is_unpriced_and_warned_about_once(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger=price_table.log.name)
    local = ProviderConfig(kind="openai", model="qwen-local-7b", base_url="http://127.0.0.1:8080/v1")
    assert local.prices() is None and local.prices() is None
    assert ProviderConfig(kind="scripted").prices() is None  # a scripted model names none: unpriced
    warned = [r.getMessage() for r in caplog.records if "qwen-local-7b" in r.getMessage()]
    assert len(warned) == 1 and "unpriced" in warned[0]
    # its calls cost None (unpriced), never 0
    u = policy.call_usage(Usage(input_tokens=10, output_tokens=3), [], Message(role="assistant"), None)
    assert u.cost_usd is None


def test_the_table_is_read_without_the_network(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_: Any, **__: Any) -> None:
        raise AssertionError("the price table reached for the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    table_pricing.cache_clear()
    assert table_pricing("anthropic", "claude-3-7-sonnet-latest", None) is not None
    from genai_prices import data_snapshot

    assert data_snapshot._custom_snapshot is None  # no updater ever replaced the bundled snapshot


def test_a_reported_usage_is_costed_with_its_cache_tokens_and_input_covers_them() -> None:
    p = Pricing(input_per_m_tok=3, output_per_m_tok=15, cache_read_per_m_tok=0.3, cache_write_per_m_tok=3.75)
    got = policy.call_usage(
        Usage(input_tokens=500, output_tokens=10, cache_read_tokens=800, cache_write_tokens=100),
        [],
        Message(role="assistant"),
        p,
    )
    # a provider whose input left its cache parts out: raised to their sum, nothing priced twice
    assert got.input_tokens == 900 and got.cost_usd == p.cost_usd(900, 10, 800, 100)


def test_the_scripted_model_reports_cache_reads_of_the_previous_prompt() -> None:
    system = Message(role="system", content="x" * 4 * MIN_CACHE_TOKENS)
    first = [system, Message(role="user", content="go")]
    prompt = policy.estimate_tokens(first)
    assert cache_usage(first, prompt) == (0, prompt)  # the first call writes its whole prompt
    second = [*first, Message(role="assistant", content="step"), Message(role="user", content="more")]
    prompt2 = policy.estimate_tokens(second)
    assert cache_usage(second, prompt2) == (prompt, prompt2 - prompt)  # reads the first call's prompt
    short = [Message(role="user", content="hi")]
    assert cache_usage(short, policy.estimate_tokens(short)) == (0, 0)  # under the minimum: no caching


def test_a_cost_budget_on_an_unpriced_model_is_refused_at_load_and_at_submission() -> None:
    from agentmill_client.models import Budget, RunInput
    from producer.prepared import check_priced
    from producer.submission import SubmissionError
    from shared.profiles import AgentProfile
    from shared.quotas import Quota

    unpriced = {"name": "local", "provider": {"kind": "scripted"}}
    with pytest.raises(ValueError, match=r"budget.maxCostUsd: the model 'scripted' has no price"):
        AgentProfile.model_validate({**unpriced, "budget": {"maxCostUsd": 1}})
    priced = AgentProfile.model_validate(
        {
            "name": "p",
            "provider": {"kind": "scripted", "model": "claude-sonnet-4-5"},
            "budget": {"maxCostUsd": 1},
        }
    )
    assert priced.provider.prices() is not None  # the table's
    profile = AgentProfile.model_validate(unpriced)
    run = RunInput.model_validate({"agent": "local", "inputMessages": [{"role": "user", "content": "hi"}]})
    check_priced(run, profile, Quota(tokens_per_day=10))  # no cost budget asked: fine
    check_priced(run, priced, Quota(cost_usd_per_day=5))
    asks = run.model_copy(update={"budget": Budget(max_cost_usd=0.5)})
    for r, q in ((asks, None), (run, Quota(cost_usd_per_day=5))):
        with pytest.raises(SubmissionError) as refused:
            check_priced(r, profile, q)
        assert refused.value.status == 422 and refused.value.code == "unpriced_model"
        assert "has no price" in str(refused.value)
