"""JSON Schemas an attacker sends (the tests of shared/schema_bounds.py and its callers use them)."""

from __future__ import annotations

from typing import Any

__all__ = ["REDOS", "REDOS_TEXT", "doubling"]

REDOS = "^(a|aa)*$"  # a backtracking engine takes exponential time on REDOS_TEXT
REDOS_TEXT = "a" * 41 + "b"


def doubling(levels: int = 20) -> dict[str, Any]:
    """About 1.3 KB of JSON whose ``$ref``/``allOf`` expansion doubles at each level (2**levels)."""
    defs: dict[str, Any] = {"l0": {"type": "object"}}
    for i in range(1, levels + 1):
        defs[f"l{i}"] = {"allOf": [{"$ref": f"#/$defs/l{i - 1}"}, {"$ref": f"#/$defs/l{i - 1}"}]}
    return {"$defs": defs, "$ref": f"#/$defs/l{levels}"}
