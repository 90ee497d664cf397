"""A copy of one of the machine's frozen models with some fields changed, not validated: what
``model_copy(update=…)`` does, without its generic path (deep copies, extras, private attributes:
the machine's and the client's models have none), at about a third of its cost. And ``built``: a new
one from values validated already (the machine's state, a stored input read back), as validating
them would make it."""

from __future__ import annotations

from functools import cache
from typing import Any, TypeVar

from pydantic import BaseModel

__all__ = ["built", "copied"]

M = TypeVar("M", bound=BaseModel)

_new = object.__new__
_set = object.__setattr__


def copied(model: M, **changes: Any) -> M:
    """``model.model_copy(update=changes)`` for a model with no extras or private attributes."""
    new = _new(type(model))
    _set(new, "__dict__", {**model.__dict__, **changes})
    _set(new, "__pydantic_fields_set__", model.__pydantic_fields_set__.union(changes))
    _set(new, "__pydantic_extra__", None)
    _set(new, "__pydantic_private__", None)
    return new


@cache
def _defaults(cls: type[BaseModel]) -> dict[str, Any]:
    """The model's fields in their order, at their defaults (a required one: a marker ``built``
    must replace). Only for models whose defaults are immutable (no default factory)."""
    fields = cls.model_fields
    assert all(f.default_factory is None for f in fields.values()), cls
    return {n: f.default for n, f in fields.items()}


def built(cls: type[M], **fields: Any) -> M:
    """``cls(**fields)`` for values of the fields' own types (models already validated, as they are
    kept: validating does not copy them), not validated again; the fields not given at their defaults."""
    new = _new(cls)
    _set(new, "__dict__", {**_defaults(cls), **fields})
    _set(new, "__pydantic_fields_set__", set(fields))
    _set(new, "__pydantic_extra__", None)
    _set(new, "__pydantic_private__", None)
    return new
