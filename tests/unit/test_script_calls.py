"""Script calls declared once (shared.calls): a declared script reads its arguments, keys and verdicts
by name, rendered to positions when the library is built; the scripts still read by position are
listed here, and the list only shrinks."""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
import re

import pytest

from shared import calls, scripts
from shared.calls import CALLS, ScriptCall, declared_calls
from shared.calls.base import argv_source, bind
from shared.calls.dispatch import Redispatch, RedispatchVerdict
from shared.calls.limits import CapacityAcquire, CapacityRelease, CapacityVerdict, RateSlots
from shared.calls.runs import Abort, AbortVerdict, Release
from shared.calls.schedules import SayLiveTenants
from shared.keys import Partition

POSITIONAL_READ = re.compile(r"\bARGV\[\d|\bA\[\d")
# The Lua files that read ARGV (or their copy A) by number: none. Every script's arguments are its
# declared call's fields (shared/calls), read by name.
POSITIONAL: set[str] = set()


def reading_by_position() -> set[str]:
    return {p.stem for p in scripts.LUA_DIR.glob("*.lua") if POSITIONAL_READ.search(p.read_text())}


def test_the_scripts_read_by_position_are_the_listed_ones() -> None:
    assert reading_by_position() == POSITIONAL


@pytest.mark.parametrize("name", sorted(CALLS))
def test_a_declared_script_reads_nothing_by_position(name: str) -> None:
    body = (scripts.LUA_DIR / f"{SCRIPT_FILE[name]}.lua").read_text()
    assert not re.search(r"\b(ARGV|KEYS)\[\d", body), f"{name}.lua reads a slot by number"
    rendered = scripts.source(name)
    assert not re.search(r"\b(ARG|KEY|V)\.[A-Z]", rendered), "a token left unrendered"


SCRIPT_FILE = {name: parts[-1] for name, parts in scripts.SCRIPTS.items()}


def test_a_token_the_call_does_not_declare_is_refused() -> None:
    assert (
        bind(Release, "return {ARG.RUN_ID, KEY.RUN, V.FENCED}", "release")
        == "return {ARGV[2], KEYS[1], 'fenced'}"
    )
    with pytest.raises(ValueError, match=r"ARG\.TENANT"):
        bind(Release, "return ARG.TENANT", "release")
    with pytest.raises(ValueError, match=r"ARG\.RUN_ID"):
        bind(None, "return ARG.RUN_ID", "beat")  # a script with no declared call names no slot


def test_the_fields_in_order_are_the_arguments_and_none_is_sent_empty() -> None:
    assert [f.name for f in dataclasses.fields(Abort)] == ["run_id", "reason", "tenant", "actor"]
    assert Abort("r1", "why").argv() == ["r1", "why", "", ""]
    assert Release(3, "r1", 2).argv() == [3, "r1", 2]  # its tail (lost_owner) only when given
    assert Release(3, "r1", 2, "w1~2").argv() == [3, "r1", 2, "w1~2"]
    assert Abort.verdict([b"requested", b"running"]) is AbortVerdict.REQUESTED
    with pytest.raises(ValueError):
        Abort.verdict([b"no-such-verdict"])


def test_a_last_tuple_field_is_the_rest_of_the_arguments() -> None:
    assert SayLiveTenants(100, ("a", "b")).argv() == [100, "a", "b"]
    assert SayLiveTenants(100, ()).argv() == [100]
    assert (
        SayLiveTenants.positions()["ARGN.TENANTS"] == "2" and "ARG.TENANTS" not in SayLiveTenants.positions()
    )


def _reference_argv(call: ScriptCall) -> list[object]:
    """What argv sends, read off the fields as the class declares them (its generated argv must agree)."""
    fs = dataclasses.fields(call)
    args = [
        f for f in fs if not f.metadata.get("agentmill.key_only") and not f.metadata.get("agentmill.tail")
    ]
    tail = [f for f in fs if f.metadata.get("agentmill.tail")]
    sent = [i for i, f in enumerate(tail, 1) if getattr(call, f.name) != f.default]
    args += tail[: max(sent, default=0)]  # up to the last field off its default
    out: list[object] = []
    for f in args:
        v = getattr(call, f.name)
        out += list(v) if str(f.type).startswith("tuple") else ["" if v is None else v]
    return out


def _samples(cls: type[ScriptCall]) -> list[ScriptCall]:
    """Instances of a call: every field set (a rest to two values), then each field at None, then
    each tail field alone off its default."""
    fs = dataclasses.fields(cls)

    def value(f: dataclasses.Field[object], i: int) -> object:
        return (f"r{i}", i) if str(f.type).startswith("tuple") else f"v{i}"

    full = {f.name: value(f, i) for i, f in enumerate(fs)}
    plain = {f.name: value(f, i) for i, f in enumerate(fs) if not f.metadata.get("agentmill.tail")}
    out = [cls(**full), cls(**plain)]  # type: ignore[arg-type]
    out += [cls(**{**full, f.name: None}) for f in fs if not str(f.type).startswith("tuple")]  # type: ignore[arg-type]
    out += [cls(**{**plain, f.name: value(f, 99)}) for f in fs if f.metadata.get("agentmill.tail")]  # type: ignore[arg-type]
    return out


def test_argv_reads_a_calls_fields_once_per_class(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every step's commit builds an argv: what it reads off the fields is the class's, read once."""
    assert Abort("r0", "warm").argv() == ["r0", "warm", "", ""]
    read: list[type] = []
    fields = dataclasses.fields
    monkeypatch.setattr(dataclasses, "fields", lambda c: read.append(c) or fields(c))
    assert [Abort("r1", "why", "t1").argv(), Abort("r2", "x").argv()] == [
        ["r1", "why", "t1", ""],
        ["r2", "x", "", ""],
    ]
    assert read == []


@pytest.mark.parametrize("name", sorted(CALLS))
def test_a_calls_argv_is_its_fields_in_order_none_empty_the_rest_spread_the_tail_to_its_last_sent(
    name: str,
) -> None:
    """argv is written from the class's fields once (base.argv_source): it sends what they declare."""
    cls = CALLS[name]
    if "argv" in vars(cls):
        pytest.skip("the call writes its own argv")
    for call in _samples(cls):
        assert call.argv() == _reference_argv(call), argv_source(cls)


@pytest.mark.parametrize(
    "name", sorted(n for n, c in CALLS.items() if c.VERDICT and "verdict" not in vars(c))
)
def test_every_verdict_is_read_as_its_member_from_bytes_str_or_a_reply(name: str) -> None:
    """Each member, from the reply's first element as either client decodes it (bytes, str)."""
    cls = CALLS[name]
    assert cls.VERDICT is not None
    for v in cls.VERDICT:
        for reply in (v.value.encode(), v.value, [v.value.encode(), b"1"], [v.value]):
            assert cls.verdict(reply) is v
    with pytest.raises(ValueError):
        cls.verdict([b"no-such-verdict"])


def test_a_calls_keys_are_its_declared_keys_on_the_partition() -> None:
    part = Partition(0, 1)
    assert Abort("r1", "x").keys(part) == part.run_keys("r1")
    assert Release(1, "r1", 2).keys(part) == part.run_keys("r1")
    assert len(Abort.KEY_NAMES) == 3 and Release.KEY_NAMES == ("run", "stream", "tools")
    assert Abort.header().startswith("-- KEYS: run, stream, tools   ARGV: run_id, reason, tenant")


def test_a_key_only_field_builds_the_keys_and_is_no_argument() -> None:
    part = Partition(0, 1)
    call = RateSlots("t1", ("k1", "k2"), 5, ("r1", "2", "1000", "r2", "3", "2000"))
    assert call.keys(part) == [part.rate_key("t1", "k1"), part.rate_key("t1", "k2")]
    assert call.argv() == [5, "r1", "2", "1000", "r2", "3", "2000"]
    assert RateSlots.positions()["ARG.MOST"] == "ARGV[1]" and RateSlots.positions()["ARGN.RUNS"] == "2"
    assert not any("TENANT" in t or "RATE_KEYS" in t for t in RateSlots.positions())
    assert RateSlots.header().startswith("-- KEYS: ") and "ARGV: most, runs" in RateSlots.header()
    leave = CapacityRelease("e1", True, "h1", 0, -1)
    assert leave.argv() == ["h1", 0, -1] and len(leave.keys()) == 4
    assert len(CapacityRelease("e1", False, "h1", 10, 7).keys()) == 2  # the line's keys only to leave it


def test_a_verdict_read_from_the_reply_where_the_script_puts_it() -> None:
    assert CapacityAcquire.verdict([3, b"concurrency", 0]) is CapacityVerdict.CONCURRENCY
    assert Redispatch.verdict([b"redispatched", b"job_lost"]) is RedispatchVerdict.REDISPATCHED


def _defined_calls() -> set[type[ScriptCall]]:
    """Every ScriptCall subclass the modules of shared.calls define, exported or not."""
    found: set[type[ScriptCall]] = set()
    for info in pkgutil.iter_modules(calls.__path__):
        module = importlib.import_module(f"shared.calls.{info.name}")
        found |= {
            c
            for c in vars(module).values()
            if isinstance(c, type)
            and issubclass(c, ScriptCall)
            and c is not ScriptCall
            and c.__module__ == module.__name__
        }
    return found


def test_every_call_a_module_defines_is_in_calls_by_its_script() -> None:
    defined = _defined_calls()
    assert len(defined) > 50
    assert {c.SCRIPT: c for c in defined} == CALLS
    # a declared script is one of the library's, and its body reads its slots by name (ARG.*): a
    # call left out of CALLS would fail to render (bind refuses its tokens)
    assert set(CALLS) <= set(scripts.SCRIPTS)


def test_calls_are_built_from_the_modules_exports() -> None:
    assert declared_calls() == CALLS
    schedules = importlib.import_module("shared.calls.schedules")
    exported = list(schedules.__all__)
    try:
        schedules.__all__ = [n for n in exported if n != "ScheduleRate"]
        assert "schedule_rate" not in declared_calls()  # not exported: not declared
    finally:
        schedules.__all__ = exported
