"""Prices from a maintained table: the ``genai-prices`` package's bundled snapshot, looked up by a
profile's provider and model when the profile gives no ``pricing`` of its own.

The snapshot ships inside the package and is read from there: agentmill never starts the package's
updater (``UpdatePrices``, its only network access), so a lookup is offline and the same on every
worker of one release. A lookup happens once per provider and model in a process; a call's cost is
then ``Pricing.cost_usd`` (shared/prices.py), whose decimal arithmetic equals the table's own
``calc_price`` (tests/unit/test_pricing.py holds them equal over recorded usages).

The provider as the table knows it: ``anthropic`` for an ``anthropic`` profile; for ``openai`` its
``baseUrl`` (matched against the table's API URLs: a local server is in none, so its models are
unpriced) or OpenAI's own without one; a ``scripted`` profile that names a ``model`` is priced as
that model wherever the table finds it (the bench and tests cost a scripted run as a real model's).
A model the table does not know is unpriced: ``None``, and a warning logged once per model.
"""

from __future__ import annotations

import logging
from decimal import Decimal
from functools import lru_cache
from typing import Any

from shared.prices import PriceTier, Pricing

__all__ = ["pricing_of", "table_pricing"]

log = logging.getLogger("agentmill.pricing")

_PRICES = ("input_mtok", "output_mtok", "cache_read_mtok", "cache_write_mtok")


def pricing_of(kind: str, model: str | None, base_url: str | None, own: Pricing | None) -> Pricing | None:
    """The prices a call costs by: the profile's own, else the table's; None: unpriced."""
    return own if own is not None else table_pricing(kind, model, base_url)


@lru_cache(maxsize=256)
def table_pricing(kind: str, model: str | None, base_url: str | None) -> Pricing | None:
    """The table's prices for this provider and model (None, warned once, when it has none)."""
    if not model:
        return None
    where: dict[str, Any]
    if kind == "anthropic":
        where = {"provider_id": "anthropic"}
    elif kind == "openai":
        where = {"provider_api_url": base_url} if base_url else {"provider_id": "openai"}
    elif kind == "scripted":
        where = {}
    else:
        where = {"provider_id": kind}
    try:
        from genai_prices import Usage, calc_price

        price = calc_price(Usage(input_tokens=0, output_tokens=0), model, **where).model_price
    except (LookupError, ValueError) as exc:  # not in the table (or a reference it cannot read)
        log.warning(
            "model %r (provider %s) has no price in the table and none in its profile: its calls are "
            "unpriced (costUsd null); give the profile's provider a pricing to cost them (%s)",
            model,
            kind,
            exc,
        )
        return None
    return _pricing(price)


def _pricing(price: Any) -> Pricing | None:
    """The table's ModelPrice as a Pricing: base prices and every tier (a tier applies to all of a
    call's tokens once its input exceeds the tier's start, to each price that has that tier)."""
    got = {name: getattr(price, name, None) for name in _PRICES}
    if got["input_mtok"] is None or got["output_mtok"] is None:
        return None  # not a model priced by tokens in and out
    starts = sorted(
        {t.start for p in got.values() if p is not None and not isinstance(p, Decimal) for t in p.tiers}
    )

    def at(p: Any, above: int | None) -> float | None:
        if p is None:
            return None
        if isinstance(p, Decimal):
            return float(p)
        chosen = p.base
        for t in p.tiers:
            if above is not None and t.start <= above:
                chosen = t.price
        return float(chosen)

    def rates(above: int | None) -> dict[str, float | None]:
        return {
            "input_per_m_tok": at(got["input_mtok"], above),
            "output_per_m_tok": at(got["output_mtok"], above),
            "cache_read_per_m_tok": at(got["cache_read_mtok"], above),
            "cache_write_per_m_tok": at(got["cache_write_mtok"], above),
        }

    base = rates(None)
    tiers = [PriceTier(above_input_tokens=s, **rates(s)) for s in starts]
    return Pricing(**base, tiers=tiers)
