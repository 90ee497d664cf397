"""A tenant's JSON Schema within its bounds (shared/schema_bounds.py) and run by the bounded
validator (shared/schema_validator.py): the attacks refused or cheap, each bound named, ordinary
schemas unchanged, and a property over generated schemas and values."""

from __future__ import annotations

import contextlib
import gc
import time
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from agentmill_client import limits
from shared.schema_bounds import SchemaBoundError, check_bounds
from shared.schema_validator import compiled, validation_errors
from tests.support.schemas import REDOS, REDOS_TEXT, doubling
from worker.core import policy

CHECK_CPU_S = 0.25  # compile + validate at worst: ~50 ms of CPU idle, ~100 ms on a loaded 2-core machine


@contextlib.contextmanager
def cpu_within(seconds: float) -> Iterator[None]:
    """The block's own CPU under ``seconds``: the collector is off meanwhile, since a full pass over
    a suite's heap (tens of ms, more under load) would be counted against the checker."""
    gc.disable()
    t0 = time.thread_time()
    try:
        yield
    finally:
        used = time.thread_time() - t0
        gc.enable()
    assert used < seconds, f"{used * 1000:.0f} ms of CPU, bound {seconds * 1000:.0f} ms"


def refused(schema: Any, value: Any = None) -> SchemaBoundError:
    with pytest.raises(SchemaBoundError) as got:
        validation_errors(schema, value)
    return got.value


def test_a_backtracking_pattern_runs_in_linear_time() -> None:
    schema = {"type": "object", "properties": {"s": {"type": "string", "pattern": REDOS}}}
    with cpu_within(0.1):
        errors = validation_errors(schema, {"s": REDOS_TEXT})
    assert [e.message for e in errors] == [f"{REDOS_TEXT!r} does not match {REDOS!r}"]
    assert validation_errors(schema, {"s": "a" * 41}) == []
    pp = {"type": "object", "patternProperties": {REDOS: {"type": "integer"}}, "additionalProperties": False}
    with cpu_within(0.1):
        assert [e.message for e in validation_errors(pp, {REDOS_TEXT: 1})] == [
            f"{REDOS_TEXT!r} does not match any of the regexes: {REDOS!r}"
        ]
        assert validation_errors(pp, {"a" * 41: 1}) == []


def test_the_doubling_schema_is_refused_at_compile_naming_the_bound() -> None:
    schema = doubling(20)
    assert 1_000 < len(str(schema)) < 1_600
    with cpu_within(0.1):
        err = refused(schema, {})
    assert err.bound == "branches" and "$refs are followed" in err.message
    # The same doubling through properties (no combinator) meets the node bound.
    defs: dict[str, Any] = {"l0": {"type": "object"}}
    for i in range(1, 21):
        defs[f"l{i}"] = {
            "properties": {"a": {"$ref": f"#/$defs/l{i - 1}"}, "b": {"$ref": f"#/$defs/l{i - 1}"}}
        }
    assert refused({"$defs": defs, "$ref": "#/$defs/l20"}).bound == "nodes"


@pytest.mark.parametrize(
    ("schema", "bound", "says"),
    [
        ({"enum": ["x" * 1000] * 40}, "bytes", f"at most {limits.MAX_SCHEMA_BYTES}"),
        (None, "depth", "deeper than"),  # built in the test: MAX_SCHEMA_DEPTH nested items
        ({"pattern": "(a)\\1"}, "patterns", "backreferences"),
        ({"pattern": "(?=a)b"}, "patterns", "lookaround"),
        ({"pattern": "a" * (limits.MAX_SCHEMA_PATTERN_CHARS + 1)}, "patterns", "characters"),
        ({"patternProperties": {"(?<=x)y": {}}}, "patterns", "RE2"),
        (
            {"unevaluatedProperties": False, "allOf": [{"patternProperties": {"a": {}}}]},
            "patterns",
            "unevaluated",
        ),
        ({"$ref": "https://example.com/s.json"}, "refs", "inside the schema"),
        ({"$dynamicRef": "#meta"}, "refs", "not supported"),
        ({"properties": {"a": {"$id": "https://example.com/a", "type": "string"}}}, "refs", "root"),
        ({"type": "strin"}, "schema", "not a JSON Schema"),
    ],
)
def test_each_bound_is_named(schema: Any, bound: str, says: str) -> None:
    if bound == "depth":
        schema = {"type": "object"}
        for _ in range(limits.MAX_SCHEMA_DEPTH):
            schema = {"items": schema}
    err = refused(schema)
    assert err.bound == bound and says in err.message, err.message


def test_combinator_branches_are_bounded() -> None:
    schema = {"anyOf": [{"const": i} for i in range(limits.MAX_SCHEMA_BRANCHES + 1)]}
    assert refused(schema).bound == "branches"
    assert check_bounds({"anyOf": [{"const": i} for i in range(limits.MAX_SCHEMA_BRANCHES)]}).branches == 500


def test_a_recursive_schema_is_accepted_and_its_cost_is_bounded_by_steps() -> None:
    tree = {"type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#"}}}}
    assert check_bounds(tree).nodes == 6  # the root followed once through its reference, not again
    assert validation_errors(tree, {"kids": [{"kids": []}, {"kids": [{}]}]}) == []
    # Each level tries both branches of a failing subschema: 2**30 without the budget.
    both = {
        "type": "object",
        "properties": {"a": {"anyOf": [{"$ref": "#"}, {"$ref": "#"}]}},
        "required": ["b"],
    }
    value: dict[str, Any] = {}
    for _ in range(30):
        value = {"a": value}
    with cpu_within(CHECK_CPU_S):
        err = refused(both, value)
    assert err.bound == "steps" and str(limits.MAX_SCHEMA_STEPS) in err.message


@pytest.mark.parametrize(
    "schema",
    [
        {"allOf": [{}, {"uniqueItems": True}, {"$ref": "#"}]},
        {"$ref": "#"},
        {"not": {"anyOf": [{"$ref": "#/$defs/a"}]}, "$defs": {"a": {"if": {"$ref": "#"}}}},
        {"properties": {"x": {"$ref": "#/$defs/a"}}, "$defs": {"a": {"oneOf": [{"$ref": "#/$defs/a"}]}}},
        {"dependentSchemas": {"k": {"$ref": "#"}}},
    ],
)
def test_a_reference_looping_on_the_same_value_is_refused_at_compile(schema: dict[str, Any]) -> None:
    # Validation would recurse until the interpreter's stack ran out: seconds of CPU under a tracer.
    with cpu_within(0.05):
        err = refused(schema, [None, None])
    assert err.bound == "refs" and "leads back to itself" in err.message, err.message


def test_a_reference_through_the_value_is_not_a_loop() -> None:
    tree = {"anyOf": [{"type": "null"}, {"type": "array", "items": {"$ref": "#"}}]}
    assert validation_errors(tree, [[None], [[None]]]) == []
    assert "does not resolve" in refused({"$ref": "#/$defs/missing", "allOf": [{}]}, 1).message  # not a loop


def test_unique_items_hashes_and_keeps_json_equality() -> None:
    schema = {"type": "array", "uniqueItems": True}
    many = [{"x": i, "y": [i]} for i in range(2_000)]  # every pair compared: 2 million comparisons
    with cpu_within(CHECK_CPU_S):
        assert validation_errors(schema, many) == []
    assert validation_errors(schema, [1, 1.0]) and validation_errors(schema, [{"a": [1]}, {"a": [1.0]}])
    assert validation_errors(schema, [True, 1, 0, False, "1"]) == []


def test_a_schema_compiles_once_by_its_content() -> None:
    a = compiled({"type": "object", "required": ["x"], "properties": {"x": {"type": "string"}}})
    b = compiled({"properties": {"x": {"type": "string"}}, "required": ["x"], "type": "object"})
    assert a is b


def test_ordinary_checks_read_as_before() -> None:
    schema = {
        "type": "object",
        "properties": {"n": {"type": "integer"}, "code": {"type": "string", "pattern": "^[A-Z]{3}$"}},
        "required": ["n"],
        "additionalProperties": False,
    }
    assert policy.argument_problem(schema, {"n": "x"}) == "n: 'x' is not of type 'integer'"
    assert (
        policy.argument_problem(schema, {"n": 1, "code": "abc"}) == "code: 'abc' does not match '^[A-Z]{3}$'"
    )
    assert policy.argument_problem(schema, {"n": 1, "z": 2}) == (
        "arguments: Additional properties are not allowed ('z' was unexpected)"
    )
    assert "bound: branches" in (policy.argument_problem(doubling(), {}) or "")


# ---- a property: whatever schema passes the bounds, compile + validate stays cheap ----

_names = st.sampled_from(["a", "b", "c", "d"])
_patterns = st.sampled_from([REDOS, "^a+$", "(a|b)*c", "^(a+)+$", "[0-9]{2,5}", "(x+x+)+y"])
_leaf = st.one_of(
    st.just({}),
    st.builds(lambda t: {"type": t}, st.sampled_from(["string", "integer", "object", "array", "null"])),
    st.builds(lambda p: {"type": "string", "pattern": p}, _patterns),
    st.builds(lambda i: {"$ref": f"#/$defs/d{i}"}, st.integers(0, 2)),
    st.just({"$ref": "#"}),
    st.just({"uniqueItems": True}),
)


def _extend(inner: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    return st.one_of(
        st.builds(lambda k, xs: {k: xs}, st.sampled_from(["allOf", "anyOf", "oneOf"]), st.lists(inner, min_size=1, max_size=3)),
        st.builds(lambda d: {"type": "object", "properties": d}, st.dictionaries(_names, inner, max_size=3)),
        st.builds(lambda p, s: {"patternProperties": {p: s}}, _patterns, inner),
        st.builds(lambda s: {"type": "array", "items": s}, inner),
        st.builds(lambda s: {"not": s}, inner),
    )  # fmt: skip


_schema = st.recursive(_leaf, _extend, max_leaves=12)
_json = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.text("ab", max_size=45)),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text("abcd", max_size=45), inner, max_size=4)),
    max_leaves=40,
)  # fmt: skip


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(root=_schema, defs=st.lists(_schema, min_size=3, max_size=3), value=_json)
@example(root={"allOf": [{}, {"uniqueItems": True}, {"$ref": "#"}]}, defs=[{}, {}, {}], value=[None, None])
def test_any_accepted_schema_checks_any_value_within_the_bound(
    root: dict[str, Any], defs: list[dict[str, Any]], value: Any
) -> None:
    schema = {**root, "$defs": {f"d{i}": d for i, d in enumerate(defs)}}
    with cpu_within(CHECK_CPU_S):
        try:
            validation_errors(schema, value)
        except SchemaBoundError as exc:  # refused (a bound, or its steps spent): never anything else
            assert exc.bound in ("nodes", "branches", "steps", "depth", "schema", "patterns", "refs"), exc
