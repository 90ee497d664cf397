"""A model reply's usage in its events, from one serialisation: the forms the two dumps give."""

from __future__ import annotations

from typing import Literal

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


def test_the_forms_are_read_off_the_fields(monkeypatch: pytest.MonkeyPatch) -> None:
    """No serializer walked at every reply: the forms come from the fields (Usage's are JSON values
    as they are, which the test above checks)."""
    want = [usage_forms(u) for u in USAGES]

    def refused(*_: object, **__: object) -> None:
        raise AssertionError("serialised")

    monkeypatch.setattr(Usage, "model_dump", refused)
    assert [usage_forms(u) for u in USAGES] == want


def test_usage_has_only_fields_that_are_json_values_as_they_are() -> None:
    """What the forms rely on: no nested model, no container, no custom serializer."""
    for name, f in Usage.model_fields.items():
        assert f.annotation in (int, bool, float | None, Literal["economy"] | None), name
    assert not Usage.__pydantic_decorators__.field_serializers
    assert not Usage.__pydantic_decorators__.model_serializers
