"""The system prompt's template variables (pure): ``{{name}}`` is replaced from the run's
runtimeInitData (``{{user.name}}`` walks nested objects) and the built-ins ``{{runId}}``,
``{{sessionId}}`` and ``{{agent}}``, which runtimeInitData cannot override. A placeholder with no
value is left as written, so a prompt that shows braces literally is safe. Strings are inserted as
they are, anything else as JSON."""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import Any

import orjson

__all__ = ["names_the_run", "render"]


_VAR = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_\-]*(?:\.[A-Za-z0-9_\-]+)*)\s*\}\}")
_MISSING = object()
_PER_RUN = frozenset({"runId", "sessionId"})  # the built-ins that differ from run to run


def _lookup(data: Mapping[str, Any], path: str) -> Any:
    value: Any = data
    for part in path.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return _MISSING
        value = value[part]
    return value


def render(template: str, init_data: Mapping[str, Any] | None, builtins: Mapping[str, str]) -> str:
    data = init_data or {}

    def sub(m: re.Match[str]) -> str:
        name = m.group(1)
        value = builtins[name] if name in builtins else _lookup(data, name)
        if value is _MISSING:
            return m.group(0)
        return value if isinstance(value, str) else orjson.dumps(value).decode()

    return _VAR.sub(sub, template)


@functools.lru_cache(maxsize=256)
def names_the_run(template: str) -> bool:
    """Whether rendering ``template`` can differ between two runs without runtimeInitData: it has
    a ``{{runId}}`` or ``{{sessionId}}`` placeholder."""
    return any(m.group(1) in _PER_RUN for m in _VAR.finditer(template))
