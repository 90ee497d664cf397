"""Identifiers. Run and session ids become Redis hash tags, so braces are never allowed in them."""

from __future__ import annotations

import re
import uuid

ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$"
_ID_RE = re.compile(ID_PATTERN)


def new_run_id() -> str:
    return "run_" + uuid.uuid4().hex


def new_session_id() -> str:
    return "ses_" + uuid.uuid4().hex


def is_valid_id(value: str) -> bool:
    return bool(_ID_RE.match(value))


def new_batch_id() -> str:
    return "bat_" + uuid.uuid4().hex
