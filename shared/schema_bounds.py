"""The bounds a JSON Schema from a tenant or a tool server must keep before it runs, pure.

A schema is checked once, before it is compiled (shared/schema_validator.py keeps the compiled one by
its content's hash). The bounds (agentmill_client/limits.py) are what keeps validation cheap:

- ``bytes``: its JSON (MAX_SCHEMA_BYTES) and ``depth``: the nesting of its JSON (MAX_SCHEMA_DEPTH);
- ``nodes``: the subschemas validation may visit, with every ``$ref`` followed where it stands
  (MAX_SCHEMA_NODES). A schema whose references double at each level is small as JSON and huge
  here; a reference back into the schema it is part of (a recursive schema) is counted once;
- ``branches``: the ``allOf``/``anyOf``/``oneOf`` subschemas among those nodes (MAX_SCHEMA_BRANCHES);
- ``patterns``: each ``pattern`` and ``patternProperties`` key compiles on RE2 (shared/schema_regex.py)
  within MAX_SCHEMA_PATTERN_CHARS; a schema with both ``unevaluatedProperties`` and
  ``patternProperties`` is refused (that combination would run patterns outside RE2);
- ``refs``: references stay inside the schema (``#``, ``#/json/pointer``, ``#anchor``); neither
  ``$id`` below the root (a second base for references) nor ``$dynamicRef``/``$recursiveRef``; and no
  reference reaches back to itself on the same value (through ``$ref``, ``allOf``/``anyOf``/``oneOf``,
  ``not``, ``if``/``then``/``else`` or ``dependentSchemas`` only): validation of such a loop never
  descends into the value, so it would only end when the interpreter's stack does.

A schema past a bound raises SchemaBoundError naming the bound.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import orjson

from agentmill_client import limits
from shared.schema_regex import PatternError, compiled

__all__ = ["Measure", "SchemaBoundError", "check_bounds"]

# Keywords whose value is one subschema, a list of them, or a map of them (draft 2020-12).
_ONE = frozenset({
    "items", "additionalItems", "additionalProperties", "not", "if", "then", "else", "contains",
    "propertyNames", "unevaluatedItems", "unevaluatedProperties",
})  # fmt: skip
_LIST = frozenset({"allOf", "anyOf", "oneOf", "prefixItems"})
_MAP = frozenset({"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"})
_BRANCHING = ("allOf", "anyOf", "oneOf")
_IN_PLACE_ONE = ("not", "if", "then", "else")  # applied to the same value, as _BRANCHING and $ref are
_UNSUPPORTED = ("$dynamicRef", "$recursiveRef")
_END = object()


class SchemaBoundError(ValueError):
    """A schema past one of its bounds. ``bound``: bytes, depth, nodes, branches, patterns or refs."""

    def __init__(self, bound: str, message: str) -> None:
        super().__init__(message)
        self.bound = bound
        self.message = message


@dataclass(frozen=True, slots=True)
class Measure:
    """What a schema within its bounds measured."""

    bytes: int
    depth: int
    nodes: int
    branches: int


def check_bounds(schema: Any) -> Measure:
    """``schema`` measured against every bound; SchemaBoundError at the first one it passes."""
    try:
        size = len(orjson.dumps(schema))
    except orjson.JSONEncodeError as exc:
        raise SchemaBoundError("bytes", f"the schema cannot be stored as JSON: {exc}") from None
    if size > limits.MAX_SCHEMA_BYTES:
        raise SchemaBoundError(
            "bytes", f"the schema is {size} bytes of JSON; at most {limits.MAX_SCHEMA_BYTES}"
        )
    depth = _depth(schema)
    nodes, branches = _expand(schema)
    _refuse_loops(schema)
    return Measure(size, depth, nodes, branches)


def _depth(schema: Any) -> int:
    deepest = 0
    todo: list[tuple[Any, int]] = [(schema, 1)]
    while todo:
        v, d = todo.pop()
        if isinstance(v, dict | list):
            if d > limits.MAX_SCHEMA_DEPTH:
                raise SchemaBoundError(
                    "depth", f"the schema nests deeper than {limits.MAX_SCHEMA_DEPTH} objects and arrays"
                )
            deepest = max(deepest, d)
            todo.extend((c, d + 1) for c in (v.values() if isinstance(v, dict) else v))
    return deepest


def _subschemas(node: dict[str, Any]) -> Iterator[Any]:
    for key, value in node.items():
        if key in _ONE:
            yield from value if isinstance(value, list) else (value,)  # items as a list: older drafts
        elif key in _LIST and isinstance(value, list):
            yield from value
        elif key in _MAP and isinstance(value, dict):
            yield from value.values()


def _anchors(schema: Any) -> dict[str, Any]:
    found: dict[str, Any] = {}
    todo = [schema]
    while todo:
        v = todo.pop()
        if isinstance(v, dict):
            for key in ("$anchor", "$dynamicAnchor"):
                if isinstance(name := v.get(key), str):
                    found.setdefault(name, v)
            todo.extend(v.values())
        elif isinstance(v, list):
            todo.extend(v)
    return found


def _resolve(root: Any, ref: str, anchors: dict[str, Any]) -> Any:
    """The local target of ``ref``, or None when it names nothing (validation reports that)."""
    if not ref.startswith("#"):
        raise SchemaBoundError(
            "refs", f"$ref {ref[:80]!r}: only references inside the schema (#…) are allowed"
        )
    fragment = unquote(ref[1:])
    if fragment and not fragment.startswith("/"):
        return anchors.get(fragment)
    target = root
    for raw in fragment.split("/")[1:]:
        part = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(target, dict) and part in target:
            target = target[part]
        elif isinstance(target, list) and part.isdigit() and int(part) < len(target):
            target = target[int(part)]
        else:
            return None
    return target


def _expand(root: Any) -> tuple[int, int]:
    """(nodes, branches) with every reference followed where it stands, a reference already being
    followed on the way there counted once; SchemaBoundError past a bound (the walk stops there)."""
    anchors = _anchors(root)
    nodes = branches = 0
    checked: set[int] = set()  # nodes whose own keywords were checked (a shared one is checked once)
    unevaluated = by_pattern = False
    todo: list[tuple[Any, frozenset[str]]] = [(root, frozenset())]
    while todo:
        node, following = todo.pop()
        if not isinstance(node, dict | bool):
            continue
        nodes += 1
        if nodes > limits.MAX_SCHEMA_NODES:
            raise SchemaBoundError("nodes", f"the schema expands to more than {limits.MAX_SCHEMA_NODES} subschemas "
                                   "when its $refs are followed")  # fmt: skip
        if isinstance(node, bool):
            continue
        if id(node) not in checked:
            checked.add(id(node))
            _check_keywords(node, node is root)
            unevaluated = unevaluated or "unevaluatedProperties" in node
            by_pattern = by_pattern or "patternProperties" in node
        for key in _BRANCHING:
            if isinstance(value := node.get(key), list):
                branches += len(value)
        if branches > limits.MAX_SCHEMA_BRANCHES:
            raise SchemaBoundError("branches", f"the schema has more than {limits.MAX_SCHEMA_BRANCHES} allOf/anyOf/"
                                   "oneOf branches when its $refs are followed")  # fmt: skip
        todo.extend((sub, following) for sub in _subschemas(node))
        ref = node.get("$ref")
        if isinstance(ref, str) and ref not in following:
            target = _resolve(root, ref, anchors)
            if target is not None:
                todo.append((target, following | {ref}))
    if unevaluated and by_pattern:  # jsonschema would run those patterns on Python's re
        raise SchemaBoundError(
            "patterns", "unevaluatedProperties in a schema with patternProperties is not supported"
        )
    return nodes, branches


def _check_keywords(node: dict[str, Any], at_root: bool) -> None:
    for key in _UNSUPPORTED:
        if key in node:
            raise SchemaBoundError("refs", f"{key} is not supported; use $ref")
    if not at_root and isinstance(node.get("$id"), str):
        raise SchemaBoundError("refs", "$id is only allowed at the schema's root")
    patterns: list[str] = []
    if isinstance(p := node.get("pattern"), str):
        patterns.append(p)
    if isinstance(pp := node.get("patternProperties"), dict):
        patterns.extend(pp)
    for p in patterns:
        try:
            compiled(p)
        except PatternError as exc:
            raise SchemaBoundError("patterns", str(exc)) from None


def _in_place(node: dict[str, Any], root: Any, anchors: dict[str, Any]) -> Iterator[Any]:
    """The subschemas validation applies to the same value as ``node`` (its ``$ref``'s target too)."""
    for key in _BRANCHING:
        if isinstance(value := node.get(key), list):
            yield from value
    for key in _IN_PLACE_ONE:
        if key in node:
            yield node[key]
    if isinstance(value := node.get("dependentSchemas"), dict):
        yield from value.values()
    if isinstance(ref := node.get("$ref"), str):
        yield _resolve(root, ref, anchors)


def _refuse_loops(root: Any) -> None:
    """SchemaBoundError("refs") when a subschema leads back to itself on the same value (a cycle of
    in-place applications, one of them a $ref): ``{"allOf": [{"$ref": "#"}]}`` recurses without end.
    A reference back through ``properties``, ``items``… descends into the value: it ends with it."""
    anchors = _anchors(root)
    done: set[int] = set()
    starts = [root]
    while starts:
        start = starts.pop()
        if not isinstance(start, dict):
            continue
        starts.extend(_subschemas(start))
        if id(start) in done:
            continue
        on_path: set[int] = {id(start)}
        stack: list[tuple[dict[str, Any], Iterator[Any]]] = [(start, _in_place(start, root, anchors))]
        while stack:
            node, rest = stack[-1]
            nxt = next(rest, _END)
            if nxt is _END:
                stack.pop()
                on_path.discard(id(node))
                done.add(id(node))
            elif isinstance(nxt, dict) and id(nxt) not in done:
                if id(nxt) in on_path:
                    raise SchemaBoundError(
                        "refs",
                        "a $ref leads back to itself on the same value (through allOf/anyOf/oneOf/"
                        "not/if/then/else only): validating it would never end",
                    )
                on_path.add(id(nxt))
                stack.append((nxt, _in_place(nxt, root, anchors)))
