"""JSON Schemas from tenants and tool servers, compiled once and run within a step budget.

``compiled(schema)`` checks the schema's bounds (shared/schema_bounds.py) and that it is a JSON
Schema, and keeps the validator by the SHA-256 of its canonical JSON (an LRU of ``CACHED``); a schema
refused is kept the same way with its refusal, so that sending it again costs a hash, not the check.
``is_cached(schema)`` says whether either is kept: shared/schema_compiling.py compiles the others
off the event loop.
``validation_errors(schema, value)`` runs it on a value: draft 2020-12 as jsonschema implements it,
except that patterns run on RE2 (shared/schema_regex.py), ``uniqueItems`` hashes instead of comparing
every pair, and every keyword evaluated is a step (an ``enum`` one per value it lists): past
MAX_SCHEMA_STEPS the check stops with SchemaBoundError("steps"). With the bounds, a check costs a few
tens of milliseconds at worst, so it runs inline, on the caller's thread.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any

import jsonschema
import orjson
from jsonschema.exceptions import ValidationError
from jsonschema.protocols import Validator
from referencing import Registry
from referencing.exceptions import Unresolvable

from agentmill_client import limits
from shared.schema_bounds import SchemaBoundError, check_bounds
from shared.schema_regex import search

__all__ = ["CACHED", "SchemaBoundError", "checked", "compiled", "is_cached", "keep", "validation_errors"]

CACHED = 512
Keyword = Callable[[Any, Any, Any, dict[str, Any]], Iterator[ValidationError] | None]


class _Budget(threading.local):
    left: int | None = None  # None: not counting (outside validation_errors)


_budget = _Budget()


def _charge(steps: int) -> None:
    left = _budget.left
    if left is None:
        return
    _budget.left = left - steps
    if left - steps < 0:
        raise SchemaBoundError(
            "steps", f"validating the value took more than {limits.MAX_SCHEMA_STEPS} steps of the schema"
        )


def _counted(name: str, keyword: Keyword) -> Keyword:
    def step(validator: Any, value: Any, instance: Any, schema: dict[str, Any]) -> Any:
        _charge(1 + len(value) if name == "enum" and isinstance(value, list) else 1)
        return keyword(validator, value, instance, schema)

    return step


def _pattern(
    validator: Any, pattern: str, instance: Any, schema: dict[str, Any]
) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not search(pattern, instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(
    validator: Any, patterns: dict[str, Any], instance: Any, schema: dict[str, Any]
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            if search(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _extra_keys(instance: dict[str, Any], schema: dict[str, Any]) -> list[str]:
    named = schema.get("properties", {})
    patterns = list(schema.get("patternProperties", {}))
    return [k for k in instance if k not in named and not any(search(p, k) for p in patterns)]


def _additional_properties(
    validator: Any, extra: Any, instance: Any, schema: dict[str, Any]
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    keys = _extra_keys(instance, schema)
    if validator.is_type(extra, "object"):
        for key in keys:
            yield from validator.descend(instance[key], extra, path=key)
    elif not extra and keys:
        shown = sorted(keys, key=str)
        if "patternProperties" in schema:
            regexes = ", ".join(repr(p) for p in sorted(schema["patternProperties"]))
            verb = "does" if len(shown) == 1 else "do"
            yield ValidationError(
                f"{', '.join(repr(k) for k in shown)} {verb} not match any of the regexes: {regexes}"
            )
        else:
            verb = "was" if len(shown) == 1 else "were"
            yield ValidationError(
                f"Additional properties are not allowed ({', '.join(repr(k) for k in shown)} {verb} unexpected)"
            )


def _canonical(value: Any) -> Any:
    """A hashable form equal for JSON-equal values (1 and 1.0 alike, true and 1 not)."""
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, dict):
        return ("object", frozenset((k, _canonical(v)) for k, v in value.items()))
    if isinstance(value, list):
        return ("array", tuple(_canonical(v) for v in value))
    return value


def _unique_items(
    validator: Any, unique: Any, instance: Any, schema: dict[str, Any]
) -> Iterator[ValidationError]:
    if unique and validator.is_type(instance, "array"):
        _charge(len(instance) // 100)  # hashing is linear, but not free
        if len({_canonical(v) for v in instance}) < len(instance):
            yield ValidationError(f"{instance!r} has non-unique elements")


def _validator_class() -> Any:
    base = jsonschema.Draft202012Validator
    own: dict[str, Keyword] = {
        "pattern": _pattern,
        "patternProperties": _pattern_properties,
        "additionalProperties": _additional_properties,
        "uniqueItems": _unique_items,
    }
    keywords = {**base.VALIDATORS, **own}
    return jsonschema.validators.extend(base, {k: _counted(k, f) for k, f in keywords.items()})  # type: ignore[no-untyped-call]


_Bounded = _validator_class()
_cache: OrderedDict[bytes, Validator | SchemaBoundError] = OrderedDict()  # a validator or its refusal
_lock = threading.Lock()


def _digest(schema: Any) -> bytes:
    try:
        return hashlib.sha256(orjson.dumps(schema, option=orjson.OPT_SORT_KEYS)).digest()
    except orjson.JSONEncodeError as exc:
        raise SchemaBoundError("bytes", f"the schema cannot be stored as JSON: {exc}") from None


def is_cached(schema: Any) -> bool:
    """Whether ``compiled(schema)`` answers from the cache (a validator or a refusal kept), or at once
    (a schema that is not JSON)."""
    try:
        digest = _digest(schema)
    except SchemaBoundError:
        return True
    with _lock:
        return digest in _cache


def checked(schema: Any) -> tuple[str, str] | None:
    """``schema`` checked against its bounds and the metaschema, pure (the costly part of compiling
    it, which shared/schema_compiling.py runs in a process of its own): None when it may be
    compiled, else the refusal's (bound, message)."""
    try:
        check_bounds(schema)
        jsonschema.Draft202012Validator.check_schema(schema)
    except SchemaBoundError as exc:
        return exc.bound, exc.message
    except jsonschema.SchemaError as exc:
        return "schema", f"not a JSON Schema: {exc.message}"
    return None


def keep(schema: Any, refusal: tuple[str, str] | None) -> Validator | SchemaBoundError:
    """``schema``'s validator (``refusal`` None: it was ``checked``) or its refusal, into the cache."""
    kept: Validator | SchemaBoundError = (
        _Bounded(schema, registry=Registry()) if refusal is None else SchemaBoundError(*refusal)
    )
    digest = _digest(schema)
    with _lock:
        _cache[digest] = kept
        while len(_cache) > CACHED:
            _cache.popitem(last=False)
    return kept


def compiled(schema: Any) -> Validator:
    """The validator of ``schema``, from the cache or compiled now; SchemaBoundError when the schema
    passes a bound or is not a JSON Schema (bound ``schema``), kept as the validator would be."""
    digest = _digest(schema)
    with _lock:
        found = _cache.get(digest)
        if found is not None:
            _cache.move_to_end(digest)
    if found is None:
        found = keep(schema, checked(schema))
    if isinstance(found, SchemaBoundError):
        raise SchemaBoundError(found.bound, found.message)
    return found


def validation_errors(schema: Any, value: Any, most: int | None = None) -> list[ValidationError]:
    """``value``'s errors against ``schema`` (the first ``most``; None: all), within MAX_SCHEMA_STEPS;
    SchemaBoundError when the schema is refused or the check passes its budget."""
    validator = compiled(schema)
    _budget.left = limits.MAX_SCHEMA_STEPS
    errors: list[ValidationError] = []
    try:
        for error in validator.iter_errors(value):
            errors.append(error)
            if most is not None and len(errors) >= most:
                break
    except Unresolvable as exc:
        raise SchemaBoundError("refs", f"a $ref of the schema does not resolve: {exc}") from None
    except RecursionError:
        raise SchemaBoundError("depth", "the schema recurses deeper than the value allows") from None
    finally:
        _budget.left = None
    return errors
