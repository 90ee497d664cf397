"""Patterns of tenants' JSON Schemas (``pattern``, ``patternProperties``) on RE2.

RE2 matches in time linear in the text, whatever the pattern: no backtracking, so a pattern such as
``^(a|aa)*$`` cannot stall the process that runs it. It has no backreferences and no lookaround; a
pattern that needs them is refused (``PatternError``) rather than run on a backtracking engine.
Compiled patterns are kept (an LRU of ``CACHED``), so a schema's patterns compile once.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import re2

from agentmill_client import limits

__all__ = ["CACHED", "MAX_PROGRAM_BYTES", "PatternError", "compiled", "search"]

CACHED = 1_024
MAX_PROGRAM_BYTES = 1 << 20  # RE2's memory for one compiled pattern: a larger program is refused


class PatternError(ValueError):
    """A pattern RE2 cannot run within its bounds: its message says why."""


def _options() -> Any:
    opts = re2.Options()
    opts.log_errors = False  # the refusal is ours to report
    opts.max_mem = MAX_PROGRAM_BYTES
    return opts


_OPTIONS = _options()


@lru_cache(maxsize=CACHED)
def compiled(pattern: str) -> Any:
    """``pattern`` compiled by RE2; PatternError when it is too long or RE2 cannot compile it."""
    if len(pattern) > limits.MAX_SCHEMA_PATTERN_CHARS:
        raise PatternError(f"pattern is {len(pattern)} characters; at most {limits.MAX_SCHEMA_PATTERN_CHARS}")
    try:
        return re2.compile(pattern, _OPTIONS)
    except re2.error as exc:
        why = exc.args[0].decode(errors="replace") if exc.args and isinstance(exc.args[0], bytes) else exc
        raise PatternError(
            f"pattern {pattern[:80]!r} cannot run on RE2 (no backreferences or lookaround): {why}"
        ) from None


def search(pattern: str, text: str) -> bool:
    """Whether ``pattern`` matches somewhere in ``text`` (JSON Schema's pattern semantics)."""
    return compiled(pattern).search(text) is not None
