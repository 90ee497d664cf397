"""The bases of every wire model. One convention: attributes and constructor keywords are Python's
snake_case (``view.run_id``, ``Usage(input_tokens=3)``); the JSON is camelCase (``runId``), each
field's alias, and models serialise by alias (``codec.encode``, the API's answers).

``Model``: frozen values whose unknown fields are refused (so a typo is an error naming the field,
not a silent default). ``Answer``: the API's answers and the small request bodies, whose unknown
fields are ignored (so an older client reads a newer API's answers).

Deprecated for one release: reading an attribute by its camelCase name (``view.runId``) still
answers, with a DeprecationWarning naming the snake_case attribute. Constructor keywords take both
spellings (the camelCase one is the field's alias).
"""

from __future__ import annotations

import warnings
from functools import cache
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

__all__ = ["Answer", "Model", "WireModel", "camel_names"]


@cache
def camel_names(cls: type[BaseModel]) -> dict[str, str]:
    """A model's camelCase attribute names (its fields' generated aliases) -> the snake_case ones."""
    return {
        info.alias: name
        for name, info in cls.model_fields.items()
        if info.alias is not None and info.alias != name and info.alias == to_camel(name)
    }


class WireModel(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)

    if not TYPE_CHECKING:  # type checkers see only the snake_case names: an old one is an error there

        def __getattr__(self, name: str) -> Any:
            new = camel_names(type(self)).get(name)
            if new is None:
                return super().__getattr__(name)
            warnings.warn(
                f"{type(self).__name__}.{name} is deprecated: read .{new} (attributes are snake_case;"
                f" {name} is the JSON name)",
                DeprecationWarning,
                stacklevel=2,
            )
            return getattr(self, new)


class Model(WireModel):
    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=False)


class Answer(WireModel):
    model_config = ConfigDict(extra="ignore")
