"""JSON encoding (orjson) of models: the camelCase wire form."""

from __future__ import annotations

from typing import Any

import orjson
from pydantic import BaseModel

__all__ = ["encode", "to_jsonable"]


def to_jsonable(model: BaseModel) -> dict[str, Any]:
    """The camelCase wire form of a model, without unset optionals."""
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


def encode(model: BaseModel) -> bytes:
    return orjson.dumps(to_jsonable(model))
