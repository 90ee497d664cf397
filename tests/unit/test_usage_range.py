"""GET /v1/usage's range (producer/usage.py usage_range): defaults, bounds, and every bad input a
ValueError naming the parameter (a 422), never an exception of its own (a 500)."""

from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import given
from hypothesis import strategies as st

from producer.usage import MAX_USAGE_DAYS, usage_range

TODAY = dt.date(2026, 11, 25)


def test_defaults_are_the_thirty_days_to_today() -> None:
    assert usage_range(None, None, TODAY) == (dt.date(2026, 10, 27), TODAY)
    assert usage_range(None, "2026-01-31", TODAY) == (dt.date(2026, 1, 2), dt.date(2026, 1, 31))


@pytest.mark.parametrize(
    ("start", "end", "named"),
    [("2026-01-01", "2026-12-31", "from"), ("2026-11-25", "2026-11-01", "from"), ("x", None, "from"),
     (None, "0001-01-05", "to"), (None, "2026-13-01", "to")],
)  # fmt: skip
def test_bad_ranges_name_their_parameter(start: str | None, end: str | None, named: str) -> None:
    with pytest.raises(ValueError, match=f"^{named}: "):
        usage_range(start, end, TODAY)


@given(
    st.one_of(st.none(), st.text(max_size=12), st.dates().map(str)),
    st.one_of(st.none(), st.text(max_size=12), st.dates().map(str)),
)
def test_any_input_is_a_range_within_the_bound_or_a_value_error(start: str | None, end: str | None) -> None:
    try:
        first, last = usage_range(start, end, TODAY)
    except ValueError:
        return
    assert first <= last and (last - first).days < MAX_USAGE_DAYS
