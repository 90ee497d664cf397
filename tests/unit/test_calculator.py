"""The calculator never works without a bound: for any expression it returns exactly
what Python computes, or refuses with a clear error, within a few milliseconds, nested powers too."""

from __future__ import annotations

import time

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from worker.tools.base import ToolError
from worker.tools.calculator import MAX_BITS, evaluate

BOUND_S = 0.05  # a bound, not a speed test: the attack this replaces took 58 s
BOMB = "(((99**64)**64)**64)**64"

LEAVES = st.one_of(
    st.integers(-(10**6), 10**6),
    st.sampled_from([0, 1, 2, 9, 64, 99, 2**31 - 1, 10**100, 2**MAX_BITS - 1]),
    st.integers(0, 10**150),
    st.floats(allow_nan=False, allow_infinity=False, width=64),
).map(lambda v: f"({v!r})")
OPS = st.sampled_from(["+", "-", "*", "/", "//", "%", "**"])


def _tree(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    binary = st.tuples(children, OPS, children).map(lambda t: f"({t[0]}{t[1]}{t[2]})")
    unary = st.tuples(st.sampled_from(["-", "+"]), children).map(lambda t: f"({t[0]}{t[1]})")
    return binary | unary


EXPRESSIONS = st.recursive(LEAVES, _tree, max_leaves=12)


def _timed(expression: str) -> tuple[float | int | ToolError, float]:
    """The evaluation's CPU time (this thread's), so a loaded machine does not make it look slow."""
    t0 = time.thread_time()
    try:
        out: float | int | ToolError = evaluate(expression)
    except ToolError as exc:
        out = exc
    return out, time.thread_time() - t0


@settings(max_examples=400, deadline=None)
@given(EXPRESSIONS)
@example(BOMB)
@example("9**9**9**9")
@example("(2**2048)*(2**2048)")
@example("-(10**300)**7")
@example("1.5**1e300")
@example("(-8)**0.5")
@example("1e308*10")
@example("(10**400)/3")
@example("1**(10**300)")
@example("0**-1")
def test_the_calculator_returns_the_exact_value_or_refuses_quickly(expression: str) -> None:
    out, took = _timed(expression)
    assert took < BOUND_S, f"{expression!r} took {took * 1000:.1f} ms"
    if isinstance(out, ToolError):
        assert str(out)  # a message the model can read
        return
    # It computed the value within its bounds, so Python's own evaluation is as cheap: compare.
    expected = eval(expression, {"__builtins__": {}})  # the test's own generated arithmetic
    assert type(out) is type(expected) and out == expected, (expression, out, expected)
    if isinstance(out, int):
        assert out.bit_length() <= MAX_BITS


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        (BOMB, "result too large"),
        ("2**2049", "result too large"),
        ("(-8)**0.5", "not a real number"),
        ("1e308*10", "not a finite number"),
        ("1/0", "division by zero"),
        ("x+1", "unsupported element"),
        ("1" * 501, "longer than 500"),
    ],
)
def test_refusals_say_why(expression: str, message: str) -> None:
    out, took = _timed(expression)
    assert isinstance(out, ToolError) and message in str(out) and took < BOUND_S


def test_results_up_to_the_bound_are_exact() -> None:
    assert evaluate("2**2047 + (2**2047 - 1)") == 2**MAX_BITS - 1
    assert evaluate("(99**64)**4") == 99**256
    assert evaluate("6*7") == 42
