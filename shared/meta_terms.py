"""The ``key=value`` terms a run's metadata is listed under (its listing index dimension ``meta``):
written by the submission (producer.prepared), and by the archiver, which drops a run's index
entries when it archives it (shared/archive/) and keeps its terms in the archive for the listings."""

from __future__ import annotations

from typing import Any

import orjson

from agentmill_client import limits

__all__ = ["meta_term", "meta_terms"]


def meta_terms(metadata: dict[str, Any] | None) -> list[str]:
    """The ``key=value`` terms a run's metadata is listed under: scalar values of the first
    MAX_META_TERMS keys (bools as true/false, numbers as JSON), keys and values bounded in length."""
    out: list[str] = []
    for k, v in (metadata or {}).items():
        if len(out) >= limits.MAX_META_TERMS:
            break
        term = meta_term(k, v)
        if term is not None:
            out.append(term)
    return out


def meta_term(key: str, value: Any) -> str | None:
    if isinstance(value, bool):
        v = "true" if value else "false"
    elif isinstance(value, int) and not -(2**63) <= value < 2**64:
        return None  # no run holds it (orjson, which stores metadata, refuses it)
    elif isinstance(value, int | float):
        v = orjson.dumps(value).decode()
    elif isinstance(value, str):
        v = value
    else:
        return None
    if len(key) > limits.MAX_META_KEY_CHARS or len(v) > limits.MAX_META_VALUE_CHARS:
        return None
    return f"{key}={v}"
