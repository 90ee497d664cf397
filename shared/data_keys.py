"""The data keys of encryption at rest (``AGENTMILL_DATA_KEYS``) as text: ``KEYID:BASE64,…`` (the first
current) or ``@path`` of a file holding it. Parsed here, once, for the settings' check at start and
for shared/payload_crypto.py."""

from __future__ import annotations

import base64
import binascii
import re
from pathlib import Path

__all__ = ["KEY_ID", "parse_keys"]

KEY_ID = re.compile(r"^[A-Za-z0-9_-]{1,32}\Z")


def parse_keys(spec: str) -> tuple[str, dict[str, bytes]]:
    """``kid:BASE64,kid:BASE64`` (first current) or ``@path`` of a file holding it: (current id, keys).
    Raises ValueError with what is wrong."""
    text = spec.strip()
    if text.startswith("@"):
        try:
            text = Path(text[1:]).read_text()
        except OSError as exc:
            raise ValueError(f"data keys file {text[1:]!r}: {exc.strerror}") from None
    keys: dict[str, bytes] = {}
    current = ""
    for item in (p.strip() for p in re.split(r"[,\n]", text)):
        if not item or item.startswith("#"):
            continue
        kid, sep, b64 = item.partition(":")
        if not sep or not KEY_ID.match(kid):
            raise ValueError(
                f"a data key is KEYID:BASE64 with a key id of [A-Za-z0-9_-]{{1,32}}, not {kid!r}"
            )
        try:
            raw = base64.b64decode(
                b64.replace("-", "+").replace("_", "/") + "=" * (-len(b64) % 4), validate=True
            )
        except (binascii.Error, ValueError):
            raise ValueError(f"data key {kid}: not base64") from None
        if len(raw) != 32:
            raise ValueError(f"data key {kid}: {len(raw)} bytes; a data key is 32 bytes (256 bits)")
        if kid in keys:
            raise ValueError(f"data key {kid} is listed twice")
        keys[kid] = raw
        current = current or kid
    if not keys:
        raise ValueError("no data key listed")
    return current, keys
