"""The submission path's calls (shared.calls.submission): the run's record (Submit) is one value that
submit, submit_many, submit_restored and spawn_child all hand submit_one.lua, read there by name."""

from __future__ import annotations

import dataclasses
import re

import orjson
import pytest

from shared import scripts
from shared.calls.admissions import AdmitTenant, TreeAdmit
from shared.calls.submission import (
    AdmitSubmit,
    SpawnChild,
    Submit,
    SubmitMany,
    SubmitRestored,
    SubmitVerdict,
    bind_new_run,
)
from shared.keys import Partition

RUN = Submit("r1", b"{}", "h", "t1", agent="a", priority="5", meta=("k=v", "x=y"))


def test_the_record_is_its_fields_in_order_with_the_metadata_terms_last() -> None:
    a = RUN.argv()
    assert a[:4] == ["r1", b"{}", "h", "t1"] and a[-2:] == ["k=v", "x=y"]
    assert len(a) == len(dataclasses.fields(Submit)) - 1 + 2
    slots = Submit.positions()
    assert slots["ARG.RUN_ID"] == "ARGV[1]" and slots["ARGN.META"] == str(len(dataclasses.fields(Submit)))


def test_submit_one_reads_the_record_by_name_only() -> None:
    raw = (scripts.LUA_DIR / "submit_one.lua").read_text()
    assert not re.search(r"\b[AK]\[\d", raw), "submit_one.lua reads a slot by number"
    rendered = bind_new_run(raw, "submit_one")
    assert not re.search(r"\b(NEW|NEWN|NEWK|V)\.[A-Z]", rendered)
    assert "A[1]" in rendered and f"'{SubmitVerdict.CREATED.value}'" in rendered
    with pytest.raises(ValueError, match=r"NEW\.NO_SUCH"):
        bind_new_run("return A[NEW.NO_SUCH]", "submit_one")


def test_the_calls_that_create_a_run_carry_the_same_record() -> None:
    part = Partition(0, 1)
    many = SubmitMany.of("t1", "b1", "", [RUN, dataclasses.replace(RUN, run_id="r2")])
    records = orjson.loads(many.runs)
    assert records[0] == [("" if v == b"{}" else v) for v in RUN.argv()] and records[1][0] == "r2"
    assert many.argv()[4:] == [b"{}", b"{}"]  # the inputs after the records
    restored = SubmitRestored(b"{}", "", ("c1", b"rec"), RUN)
    assert restored.argv() == [b"{}", "", "", 1, "c1", b"rec", *RUN.argv()]
    assert restored.keys(part) == [*RUN.keys(part), part.tools("r1"), part.staged("r1", "-")]
    staged = SubmitRestored(b"{}", "", (), dataclasses.replace(RUN, input=""), "t0k")
    assert staged.argv()[:4] == [b"{}", "", "1", 0] and staged.keys(part)[-1] == part.staged("r1", "t0k")
    child = SpawnChild("p1", "call-1", b"[]", "", 1000, 50, RUN)
    assert child.argv()[:6] == ["p1", "call-1", b"[]", "", 1000, 50] and child.argv()[6:] == RUN.argv()
    assert SpawnChild.positions()["ARGN.RUN"] == "7"
    assert SpawnChild.verdict([b"quota_exceeded", b"3"]) is SubmitVerdict.QUOTA_EXCEEDED


def test_every_call_that_creates_a_run_answers_the_one_list_of_submit_verdicts() -> None:
    for call in (Submit, SubmitMany, SubmitRestored, SpawnChild, AdmitSubmit):
        assert call.VERDICT is SubmitVerdict, call.__name__
        assert " | ".join(SubmitVerdict) in call.header(), call.__name__


def test_admissions_name_their_keys_from_their_fields() -> None:
    part = Partition(0, 1)
    assert TreeAdmit("root", "p", 2, 0, ("c1", "c2")).keys(part) == [part.tree("root")]
    assert AdmitTenant("t1", 5, "", 10, 1, ("r1",)).keys(part) == [part.tenant_active("t1")]
    assert AdmitTenant("t1", 5, -1, 10, 1, ()).argv() == ["t1", 5, -1, 10, 1]
