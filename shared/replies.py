"""A script's reply as Python reads it: each element decoded the one way (bytes from a client
without decode_responses, str from one with it, None for a nil)."""

from __future__ import annotations

from typing import Any

__all__ = ["text"]


def text(value: Any) -> str:
    """Decode a script reply element ('' for a nil)."""
    if isinstance(value, bytes):
        return value.decode()
    return "" if value is None else str(value)
