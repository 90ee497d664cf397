"""What Arize Phoenix held after the peer test (tests/peer/test_phoenix_traces.py, recorded in
tests/data/phoenix/trace.json), checked with the peer test's own checks, and every span name in it
documented in docs/operations.md#traces."""

from __future__ import annotations

import re
from pathlib import Path

import orjson

from tests.peer import phoenix

ROOT = Path(__file__).resolve().parents[2]


def test_the_recorded_phoenix_trace_holds() -> None:
    spans = orjson.loads(phoenix.DATA.read_bytes())
    counts = phoenix.check_trace(spans, "handle request")
    assert counts["chat"] >= 2 and counts["execute_tool"] >= 2 and counts["victim"] >= 1


def test_every_recorded_span_name_and_attribute_is_documented() -> None:
    doc = (ROOT / "docs" / "operations.md").read_text()
    section = doc[doc.index("## Traces") :]
    section = section[: section.find("\n## ", 1)] if "\n## " in section[1:] else section
    spans = orjson.loads(phoenix.DATA.read_bytes())
    ours = [s for s in spans if s["name"] != "handle request"]
    for s in ours:
        assert f"`{s['name'].split(' ')[0]} " in section, s["name"]
        for attr in s["attributes"]:
            if re.match(r"^(gen_ai|agentmill)\.", attr):
                assert f"`{attr}`" in section, attr
