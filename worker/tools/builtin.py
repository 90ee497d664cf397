"""Built-in tools: a calculator for the demo agent and a few for tests (echo, sleep, fail, flaky).

A tool's ``side_effects`` is its own declaration, read when a profile's toolSettings do not say
(worker/tools/declared.py): ``False`` for calculator and echo, whose calls may run again after a
lost worker without anyone seeing it. sleep, fail and flaky stay undeclared: tests use them to
stand for slow and failing tools whose calls are claimed before they run."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from worker.tools.base import ToolContext, ToolError, ToolOutcome
from worker.tools.calculator import MAX_CHARS, evaluate

__all__ = ["BUILTINS", "FunctionTool"]


def _fmt(value: float | int) -> str:
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return str(value)


@dataclass
class FunctionTool:
    name: str
    description: str
    parameters: dict[str, Any]
    fn: Callable[[dict[str, Any], ToolContext], Any]
    side_effects: bool | None = None  # False: a call may run again unseen (None: not declared)

    async def __call__(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
        out = self.fn(args, ctx)
        if asyncio.iscoroutine(out):
            out = await out
        return out if isinstance(out, ToolOutcome) else ToolOutcome(str(out))


def _calculator(args: dict[str, Any], ctx: ToolContext) -> str:
    return _fmt(evaluate(str(args["expression"])))


def _echo(args: dict[str, Any], ctx: ToolContext) -> str:
    return str(args.get("text", ""))


async def _sleep(args: dict[str, Any], ctx: ToolContext) -> str:
    ms = int(args.get("ms", 0))
    await asyncio.sleep(ms / 1000.0)
    return f"slept {ms} ms"


def _fail(args: dict[str, Any], ctx: ToolContext) -> str:
    raise ToolError(
        str(args.get("message", "this tool always fails")), retryable=bool(args.get("retryable", False))
    )


def _flaky(args: dict[str, Any], ctx: ToolContext) -> str:
    """Fails (retryably) on the first ``failures`` attempts of a call, then succeeds."""
    if ctx.attempt <= int(args.get("failures", 1)):
        raise ToolError(f"flaky failure on attempt {ctx.attempt}", retryable=True)
    return f"ok after {ctx.attempt} attempts"


def _obj(props: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": required or [], "additionalProperties": False}


BUILTINS: dict[str, FunctionTool] = {
    t.name: t
    for t in (
        FunctionTool(
            "calculator",
            # The size bound (MAX_BITS) is told in the error a too-large result gets; the text the
            # model sees stays as recorded in tests/data/llama_cpp (replayed by CI).
            "Evaluate an arithmetic expression (numbers, + - * / // % ** and parentheses).",
            _obj({"expression": {"type": "string", "maxLength": MAX_CHARS}}, ["expression"]),
            _calculator,
            side_effects=False,
        ),
        FunctionTool(
            "echo", "Return the given text.", _obj({"text": {"type": "string"}}), _echo, side_effects=False
        ),
        FunctionTool(
            "sleep",
            "Wait for ms milliseconds.",
            _obj({"ms": {"type": "integer", "minimum": 0, "maximum": 3_600_000}}),
            _sleep,
        ),
        FunctionTool(
            "fail",
            "Always fails (for tests).",
            _obj({"message": {"type": "string"}, "retryable": {"type": "boolean"}}),
            _fail,
        ),
        FunctionTool(
            "flaky",
            "Fails retryably on the first attempts, then succeeds (for tests).",
            _obj({"failures": {"type": "integer", "minimum": 0, "maximum": 10}}),
            _flaky,
        ),
    )
}
