"""JSON encoding (orjson) for models, events and checkpoints."""

from __future__ import annotations

from typing import Any, TypeVar

import orjson
from pydantic import BaseModel

M = TypeVar("M", bound=BaseModel)


def dumps(value: Any) -> bytes:
    return orjson.dumps(value)


def loads(data: bytes | str) -> Any:
    return orjson.loads(data)


def to_jsonable(model: BaseModel) -> dict[str, Any]:
    """The camelCase wire form of a model, without unset optionals."""
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


def encode(model: BaseModel) -> bytes:
    return orjson.dumps(to_jsonable(model))


def decode(cls: type[M], data: bytes | str) -> M:
    return cls.model_validate_json(data)
