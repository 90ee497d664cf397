"""A model reply's usage in its events, from one serialisation: the forms the two dumps give."""

from __future__ import annotations

import pytest

from agentmill_client.models import Usage
from worker.machine.handlers import usage_forms

USAGES = [
    Usage(),
    Usage(input_tokens=281, output_tokens=1, estimated=True),
    Usage(input_tokens=3, output_tokens=2, cost_usd=0.000123, cache_read_tokens=1, cache_write_tokens=1),
    Usage(input_tokens=3, output_tokens=2, cost_usd=0.0, lane="economy"),
    Usage(input_tokens=3, cost_usd=float("inf")),
    Usage(input_tokens=3, cost_usd=float("nan")),
]


@pytest.mark.parametrize("u", USAGES, ids=range(len(USAGES)))
def test_the_forms_are_the_two_dumps(u: Usage) -> None:
    full, compact = usage_forms(u)
    assert full == u.model_dump(by_alias=True)
    want = u.model_dump(mode="json", by_alias=True, exclude_none=True)
    assert compact == want and list(compact) == list(want)
