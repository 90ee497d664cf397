"""The shape checks of values that come from outside (headers, keys, key ids, sealed payloads, trace
context, host names) accept the whole value only: Python's ``$`` also matches before a trailing
newline and ``\\d`` matches any script's digits, which let ``"<valid>\\n"`` and ``"١s"`` through to
code that then stored, forwarded or parsed them."""

from __future__ import annotations

import re

import pytest

from producer.audit import _REQUEST_ID
from shared.api_keys import _DURATION, _KEY
from shared.data_keys import KEY_ID
from shared.netguard_rules import _LEGACY_V4
from shared.payload_crypto import SEALED
from shared.trace_context import _TRACEPARENT

CASES: list[tuple[str, re.Pattern[str], str]] = [
    ("request id", _REQUEST_ID, "req-1.a:b"),
    ("api key", _KEY, "amk_0123456789abcdef_" + "a" * 24),
    ("duration", _DURATION, "15m"),
    ("data key id", KEY_ID, "k2026"),
    ("legacy IPv4 host", _LEGACY_V4, "0x7f.1"),
    ("sealed payload", SEALED, "enc1:k1:" + "A" * 40),
    ("traceparent", _TRACEPARENT, "00-" + "a" * 32 + "-" + "b" * 16 + "-01"),
]


@pytest.mark.parametrize(("name", "pattern", "good"), CASES, ids=[c[0] for c in CASES])
def test_the_whole_value_matches_and_nothing_after_it(name: str, pattern: re.Pattern[str], good: str) -> None:
    assert pattern.match(good), name
    for tail in ("\n", "\r\n", "\nx", " "):
        assert not pattern.match(good + tail), (name, tail)


def test_a_duration_takes_ascii_digits_only() -> None:
    assert _DURATION.match("12s")
    assert not _DURATION.match("١٢s")  # Arabic-Indic digits: int() reads them, the check must not
