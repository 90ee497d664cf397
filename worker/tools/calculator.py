"""The calculator's evaluator: arithmetic on a parsed expression, bounded before it computes.

It runs on the worker's event loop (big-int arithmetic holds the GIL, so a thread would not free
the loop anyway), so its work is bounded instead: the expression is at most ``MAX_CHARS``
characters and no integer it holds exceeds ``MAX_BITS`` bits. A power's bit length is bounded from
its operands *before* it is computed (``floor(n * log2|a|) + 1`` for ``a ** n``), so
``(((99**64)**64)**64)**64`` is refused at its second power instead of computed for a minute; a
sum, product or quotient of two such integers is at most twice as long, cheap to compute, and
refused after if it is over. With every operand that small one operation costs microseconds and a
whole expression under a millisecond (measured: at most 0.6 ms for 500 characters of the most
expensive operations). Floats are constant-time; a float that overflows or is not finite, and a
complex result, are refused too.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from typing import Any

from worker.tools.base import ToolError

__all__ = ["MAX_BITS", "MAX_CHARS", "evaluate"]

MAX_CHARS = 500
MAX_BITS = 2048  # about 617 decimal digits: every integer the calculator holds is at most this
_TOO_LARGE = f"result too large: the calculator holds integers up to {MAX_BITS} bits (about 617 digits)"

_BINOPS: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[Any], Any]] = {ast.UAdd: operator.pos, ast.USub: operator.neg}


def _power_bits(base: int, exp: int) -> int:
    """An upper bound of the bit length of ``base ** exp`` (two ints), without computing it: for
    ``|base| >= 2`` it is ``floor(exp * log2|base|) + 1`` (the float's error covered by a margin)."""
    if exp < 0 or abs(base) <= 1:
        return 1  # a float (base ** -n), or 0, 1, -1
    if exp > MAX_BITS:
        return exp + 1  # at least 2 ** exp
    return math.floor(exp * math.log2(abs(base)) * (1 + 1e-12)) + 1


def _checked(value: Any) -> float | int:
    if isinstance(value, int):
        if abs(value).bit_length() > MAX_BITS:
            raise ToolError(_TOO_LARGE)
        return value
    if not isinstance(value, float):
        raise ToolError("the result is not a real number")
    if not math.isfinite(value):
        raise ToolError("the result is not a finite number")
    return value


def _binop(op: ast.operator, left: float | int, right: float | int) -> float | int:
    pow_ints = isinstance(op, ast.Pow) and isinstance(left, int) and isinstance(right, int)
    if pow_ints and _power_bits(left, right) > MAX_BITS:  # type: ignore[arg-type]
        raise ToolError(_TOO_LARGE)
    try:
        return _checked(_BINOPS[type(op)](left, right))
    except ZeroDivisionError:
        raise ToolError("division by zero") from None
    except OverflowError:
        raise ToolError("result too large for a floating-point number") from None


def evaluate(expression: str) -> float | int:
    """Arithmetic only: numbers, + - * / // % ** and parentheses; no names, no calls. Refuses
    (``ToolError``) what it cannot compute within its bounds, before computing it."""
    if len(expression) > MAX_CHARS:
        raise ToolError(f"expression is longer than {MAX_CHARS} characters")
    try:
        tree = ast.parse(expression, mode="eval")
    except (SyntaxError, ValueError) as exc:  # ValueError: e.g. an integer literal of too many digits
        raise ToolError(f"not an arithmetic expression: {getattr(exc, 'msg', exc)}") from None
    except (RecursionError, MemoryError):
        raise ToolError("expression is nested too deeply") from None

    def ev(node: ast.AST) -> float | int:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, int | float)
            and not isinstance(node.value, bool)
        ):
            return _checked(node.value)
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            return _binop(node.op, ev(node.left), ev(node.right))
        if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
            return _UNARY[type(node.op)](ev(node.operand))  # type: ignore[no-any-return]
        raise ToolError(f"unsupported element: {type(node).__name__}")

    try:
        return ev(tree)
    except RecursionError:
        raise ToolError("expression is nested too deeply") from None
