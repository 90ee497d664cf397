"""Listing helpers without Redis: metadata terms, filters and cursors (producer/listing.py)."""

from __future__ import annotations

import pytest

from producer.listing import STATUSES, ListingError, RunFilter, batch_view, decode_cursor, encode_cursor
from producer.submission import batch_run_prefix, meta_term, meta_terms
from shared import limits
from shared.models import RunStatus


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


def test_batch_view_and_batch_run_ids() -> None:
    v = batch_view({"batchId": "b", "total": "4", "done": "3", "completed": "2", "failed": "1", "running": "1",
                    "createdAt": "10", "finishedAt": "20"})  # fmt: skip
    assert v["progress"] == 0.75 and not v["finished"] and v["finishedAt"] is None
    assert v["counts"] == {s: {"running": 1, "completed": 2, "failed": 1}.get(s, 0) for s in STATUSES}
    assert set(STATUSES) == {s.value for s in RunStatus}  # every status has its counter
    assert batch_view({"batchId": "b", "total": "2", "done": "2", "finishedAt": "20"})["finishedAt"] == 20
    assert batch_run_prefix("t1", "b") != batch_run_prefix("t2", "b") != batch_run_prefix("t1", "c")
    assert batch_run_prefix("t1", "b") == batch_run_prefix("t1", "b")
