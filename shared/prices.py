"""A model's prices (USD per million tokens) and their arithmetic: a call's cost from its usage,
cache reads and writes at their own prices, and the worst case a budget holds before the call. Pure
values: the table they come from when a profile gives none is shared/price_table.py."""

from __future__ import annotations

from decimal import ROUND_HALF_EVEN, Decimal
from functools import lru_cache

from pydantic import Field

from agentmill_client.models import Model

__all__ = ["PriceTier", "Pricing", "round_usd", "usd_of_micro"]


class PriceTier(Model):
    """Prices (USD per million tokens) for a call whose input exceeds ``aboveInputTokens``: every
    token of such a call is at them (a long-context tier)."""

    above_input_tokens: int = Field(ge=0)
    input_per_m_tok: float = Field(ge=0)
    output_per_m_tok: float = Field(ge=0)
    cache_read_per_m_tok: float | None = Field(default=None, ge=0)
    cache_write_per_m_tok: float | None = Field(default=None, ge=0)


class Pricing(Model):
    """A model's prices in USD per million tokens: a run's usage gets ``costUsd`` from them. Cache
    reads and writes are parts of the input and cost their own price (None: the input price);
    ``tiers`` (ascending) replace all four above an input size. Arithmetic: shared/pricing.py."""

    input_per_m_tok: float = Field(ge=0)
    output_per_m_tok: float = Field(ge=0)
    cache_read_per_m_tok: float | None = Field(default=None, ge=0)
    cache_write_per_m_tok: float | None = Field(default=None, ge=0)
    tiers: list[PriceTier] = Field(default_factory=list, max_length=16)

    def rates(self, input_tokens: int) -> Pricing | PriceTier:
        """The prices a call with this many input tokens pays (the last tier it exceeds, else these)."""
        chosen: Pricing | PriceTier = self
        for t in self.tiers:
            if input_tokens > t.above_input_tokens:
                chosen = t
        return chosen

    def cost_usd(
        self, input_tokens: int, output_tokens: int, cache_read_tokens: int = 0, cache_write_tokens: int = 0
    ) -> float:
        """A call's cost, rounded to the nano-USD: its uncached input, cache reads, cache writes and
        output, each at its price (in decimal, so a table's prices add up exactly)."""
        r = self.rates(input_tokens)
        read = r.input_per_m_tok if r.cache_read_per_m_tok is None else r.cache_read_per_m_tok
        write = r.input_per_m_tok if r.cache_write_per_m_tok is None else r.cache_write_per_m_tok
        uncached = max(0, input_tokens - cache_read_tokens - cache_write_tokens)
        micro = (
            uncached * _dec(r.input_per_m_tok)
            + cache_read_tokens * _dec(read)
            + cache_write_tokens * _dec(write)
            + output_tokens * _dec(r.output_per_m_tok)
        )
        return usd_of_micro(micro)

    def worst_case_usd(self, prompt_tokens: int, output_tokens: int) -> float:
        """The most a call of this prompt and reply can cost: every prompt token at the dearer of the
        input and cache-write price (a call may write its whole prompt to the cache), at the tier
        the prompt is in: what a budget holds for a call before it is made."""
        r = self.rates(prompt_tokens)
        dearest = max(r.input_per_m_tok, r.cache_write_per_m_tok or 0.0)
        return usd_of_micro(prompt_tokens * _dec(dearest) + output_tokens * _dec(r.output_per_m_tok))


@lru_cache(maxsize=1024)
def _dec(price: float) -> Decimal:
    """A price as the decimal it was written as (0.3, not 0.299999…); a model's few prices, cached."""
    return Decimal(repr(price))


_NANO = Decimal("1e-9")


def usd_of_micro(micro: Decimal) -> float:
    """Tokens × USD per million tokens → USD, rounded to the nano-USD (``round_usd``)."""
    return round_usd(micro / 1_000_000)


def round_usd(usd: Decimal) -> float:
    """USD rounded half-even to the nano-USD agentmill counts in."""
    return float(usd.quantize(_NANO, rounding=ROUND_HALF_EVEN))
