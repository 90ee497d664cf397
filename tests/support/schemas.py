"""JSON Schemas an attacker sends (the tests of shared/schema_bounds.py and its callers use them)."""

from __future__ import annotations

from typing import Any

__all__ = ["REDOS", "REDOS_TEXT", "doubling", "wide"]

REDOS = "^(a|aa)*$"  # a backtracking engine takes exponential time on REDOS_TEXT
REDOS_TEXT = "a" * 41 + "b"


def doubling(levels: int = 20) -> dict[str, Any]:
    """About 1.3 KB of JSON whose ``$ref``/``allOf`` expansion doubles at each level (2**levels)."""
    defs: dict[str, Any] = {"l0": {"type": "object"}}
    for i in range(1, levels + 1):
        defs[f"l{i}"] = {"allOf": [{"$ref": f"#/$defs/l{i - 1}"}, {"$ref": f"#/$defs/l{i - 1}"}]}
    return {"$defs": defs, "$ref": f"#/$defs/l{levels}"}


def wide(properties: int = 700, tag: str = "") -> dict[str, Any]:
    """A valid schema within every bound (about 27 KB of JSON at 700 properties) whose check against
    the metaschema costs jsonschema a few hundred milliseconds; ``tag`` makes it a schema of its own."""
    props = {f"p{i}": {"type": "string", "minLength": 1} for i in range(properties)}
    return {"title": f"wide {tag}", "type": "object", "properties": props}
