"""Identifiers. Run and session ids become Redis hash tags, so braces are never allowed in them."""

from __future__ import annotations

import os
import re

__all__ = ["ID_PATTERN", "is_valid_id", "new_batch_id", "new_run_id"]

ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$"
_ID_RE = re.compile(ID_PATTERN)


def new_run_id() -> str:
    return "run_" + os.urandom(16).hex()  # uuid4's length and randomness, without its overhead


def is_valid_id(value: str) -> bool:
    return _ID_RE.fullmatch(value) is not None  # not match: "$" would let a trailing newline in


def new_batch_id() -> str:
    return "bat_" + os.urandom(16).hex()
