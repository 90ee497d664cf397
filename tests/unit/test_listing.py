"""Listing helpers without Redis: metadata terms, filters and cursors (producer/listing.py)."""

from __future__ import annotations

import base64
import string

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from agentmill_client import limits
from agentmill_client.ids import is_valid_id
from agentmill_client.models import RunStatus
from producer.listing import (
    CURSOR_MAX_CHARS,
    STATUSES,
    ListingError,
    RunFilter,
    batch_view,
    decode_cursor,
    encode_cursor,
    parse_ms,
)
from producer.prepared import meta_term, meta_terms
from producer.scope import batch_run_prefix


def test_metadata_terms_are_scalar_values_of_bounded_size() -> None:
    assert meta_terms({"team": "red", "n": 3, "ok": True, "x": 1.5, "nested": {"a": 1}, "no": None}) == [
        "team=red", "n=3", "ok=true", "x=1.5",
    ]  # fmt: skip
    assert meta_term("k" * (limits.MAX_META_KEY_CHARS + 1), "v") is None
    assert meta_term("k", "v" * (limits.MAX_META_VALUE_CHARS + 1)) is None
    many = {f"k{i}": i for i in range(limits.MAX_META_TERMS + 5)}
    assert len(meta_terms(many)) == limits.MAX_META_TERMS
    assert meta_terms(None) == []


def test_filters_name_their_indexes_and_refuse_bad_values() -> None:
    f = RunFilter(status="failed", agent="a", session_id="s1", batch_id="b1", metadata=("team=red",))
    assert f.pairs() == ["status", "failed", "agent", "a", "session", "s1", "batch", "b1", "meta", "team=red"]
    assert RunFilter().pairs() == []
    for bad, field in ((RunFilter(status="sleeping"), "status"), (RunFilter(batch_id="a{b}"), "batchId"),
                       (RunFilter(metadata=("noequals",)), "metadata"), (RunFilter(metadata=("=v",)), "metadata")):  # fmt: skip
        with pytest.raises(ListingError) as err:
            bad.pairs()
        assert err.value.field == field


def test_cursors_round_trip_and_refuse_garbage() -> None:
    c = encode_cursor("1795437405924", "run_ab:c.d-1")
    assert decode_cursor(c) == ("1795437405924", "run_ab:c.d-1")
    for garbage in ("not-a-cursor", "", encode_cursor("x", "run"), encode_cursor("12", "bad{id}")):
        with pytest.raises(ListingError):
            decode_cursor(garbage)


# What the server writes: a Redis score of a time in ms (ASCII digits, no leading zero) and a run id.
SCORES = st.integers(0, 10**limits.MAX_MS_DIGITS - 1).map(str)
ID_CHARS = string.ascii_letters + string.digits
IDS = st.builds(
    lambda head, tail: head + tail,
    st.sampled_from(ID_CHARS),
    st.text(alphabet=ID_CHARS + "_.:-", max_size=limits.MAX_ID_CHARS - 1),
)


def b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


@given(SCORES, IDS)
def test_every_cursor_the_server_writes_parses_back_to_itself(score: str, run_id: str) -> None:
    cursor = encode_cursor(score, run_id)
    assert len(cursor) <= CURSOR_MAX_CHARS
    assert decode_cursor(cursor) == (score, run_id)


@given(
    st.one_of(
        st.text(),  # anything a query string can carry
        st.text().map(lambda t: b64(t.encode())),  # base64 of anything
        st.binary().map(b64),
        st.tuples(st.text(max_size=20), st.text(max_size=140)).map(lambda p: b64(f"{p[0]}:{p[1]}".encode())),
        st.tuples(SCORES, IDS, st.integers(0, 300), st.characters()).map(  # a real cursor, one char changed
            lambda p: (c := encode_cursor(p[0], p[1]))[: p[2] % len(c)] + p[3] + c[p[2] % len(c) + 1 :]
        ),
    )
)
@example("MV8wMDA6YWJj")  # 1_000:abc
@example(b64("٣:abc".encode()))
@example(b64("１２:abc".encode()))
@example(b64(b"1 :abc"))
@example(b64(b"12:abc\n"))
@example(b64(b"12:abc") + "==")
@example("QUJD" * 1000)
def test_any_other_string_is_refused_as_a_listing_error(cursor: str) -> None:
    try:
        score, run_id = decode_cursor(cursor)
    except ListingError as err:
        assert err.field == "cursor"
        return
    # Only a cursor the server could have written gets through, exactly as written.
    assert encode_cursor(score, run_id) == cursor
    assert score.isascii() and score.isdigit() and str(int(score)) == score
    assert len(score) <= limits.MAX_MS_DIGITS and is_valid_id(run_id)


@given(st.integers(0, 10**limits.MAX_MS_DIGITS - 1))
def test_a_time_filter_parses_its_digits(ms: int) -> None:
    assert parse_ms("createdBefore", str(ms)) == ms


@given(st.text())
@example("1_000")
@example("٣")
@example("１２")
@example("1 ")
@example("+1")
@example("9" * 4299)
def test_any_other_time_filter_is_refused_as_a_listing_error(value: str) -> None:
    try:
        ms = parse_ms("createdBefore", value)
    except ListingError as err:
        assert err.field == "createdBefore"
        return
    assert value.isascii() and value.isdigit() and len(value) <= limits.MAX_MS_DIGITS and ms == int(value)


def test_ids_with_a_trailing_newline_are_not_valid() -> None:
    assert is_valid_id("run_1") and not is_valid_id("run_1\n") and not is_valid_id("x" * 129)


def test_batch_view_and_batch_run_ids() -> None:
    v = batch_view({"batchId": "b", "total": "4", "done": "3", "completed": "2", "failed": "1", "running": "1",
                    "createdAt": "10", "finishedAt": "20"})  # fmt: skip
    assert v["progress"] == 0.75 and not v["finished"] and v["finishedAt"] is None
    assert v["counts"] == {s: {"running": 1, "completed": 2, "failed": 1}.get(s, 0) for s in STATUSES}
    assert set(STATUSES) == {s.value for s in RunStatus}  # every status has its counter
    assert batch_view({"batchId": "b", "total": "2", "done": "2", "finishedAt": "20"})["finishedAt"] == 20
    assert batch_run_prefix("t1", "b") != batch_run_prefix("t2", "b") != batch_run_prefix("t1", "c")
    assert batch_run_prefix("t1", "b") == batch_run_prefix("t1", "b")
