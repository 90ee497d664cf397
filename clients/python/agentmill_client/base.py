"""The base of every wire model: camelCase JSON, frozen values, unknown fields refused (so a typo
is an error naming the field, not a silent default)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

__all__ = ["Model"]


class Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True, validate_default=False
    )
