"""Payload encryption at rest (``AGENTMILL_DATA_KEYS``): the one codec every store boundary calls.

The stored payloads are JSON that Lua scripts also read (a tool record's ``state``, an approval's
``decision``, an input's ``storeContent``, the ids and names a session or a redaction keeps), so the
codec seals JSON *leaves*: every string value becomes ``enc1:<key id>:<base64url(nonce | AES-GCM
ciphertext and tag)>`` except the strings under the keys of ``PLAIN`` (ids, names, statuses, kinds,
roles, codes: what the scripts and the listings read) and everything under ``metadata`` (what a
listing filters on and a deletion by metadata matches). Numbers and booleans (usage, timings, counts,
flags) and the object keys stay as they are. The result is still JSON of the same shape, so every
script that parses it works unchanged; the sealed strings cannot be told from nothing else: JSON
never begins with ``enc1:``, and a plaintext string that matches ``SEALED`` exactly is the one
ambiguity (docs/operations.md).

Keys: ``k2:BASE64,k1:BASE64`` (each 32 bytes, standard or URL-safe base64), the first the current
one; or ``@/path/to/file`` naming a file that holds the same text (commas or newlines). New writes
use the current key; any listed key opens what it sealed; a string sealed with a key no longer listed
raises ``DataKeyError`` naming the key (the reader answers a clear error, not a crash).

Without keys the codec seals nothing, and opening costs one substring test on data that holds no
sealed string.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import itertools
import os
import re
from collections.abc import Callable
from typing import Any

import orjson
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from shared.data_keys import parse_keys

__all__ = [
    "PLAIN",
    "Codec",
    "DataKeyError",
    "active",
    "install",
    "loads",
    "open_bytes",
    "parse_keys",
]

MAGIC = "enc1:"
_MAGIC_B = MAGIC.encode()
# a sealed string: the magic, a key id, the nonce (12 bytes) + tag (16) + ciphertext, base64url unpadded
SEALED = re.compile(r"^enc1:([A-Za-z0-9_-]{1,32}):([A-Za-z0-9_-]{38,})\Z")
_TOKEN = re.compile(r"enc1:([A-Za-z0-9_-]{1,32}):[A-Za-z0-9_-]{38,}")  # one inside any text

# Strings under these keys stay plaintext: what Lua scripts, listings and redaction read.
PLAIN = frozenset({
    "id", "runId", "sessionId", "toolCallId", "providerCallId", "childRunId", "parentRunId", "streamKey",
    "name", "state", "decision", "status", "kind", "type", "role", "code", "errorCode", "model", "provider",
    "finishReason", "stopReason", "strategy", "multitaskStrategy", "agent", "tenant", "clientId", "scope",
    "actor",
})  # fmt: skip
KEPT_TREES = frozenset({"metadata"})  # whole subtrees kept plaintext


class DataKeyError(ValueError):
    """Data sealed with a key that is not listed (removed), or that does not open with it."""


def _unb64(s: str) -> bytes:
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


class Codec:
    """Seals and opens JSON leaves with a key ring. ``Codec()`` (no keys) seals nothing."""

    def __init__(self, current: str = "", keys: dict[str, bytes] | None = None) -> None:
        self.current = current
        self._aead = {kid: AESGCM(k) for kid, k in (keys or {}).items()}
        # the key of seal_str's deterministic nonces (``same``), derived from the current key
        self._siv = (
            hmac.new(keys[current], b"agentmill nonce", hashlib.sha256).digest() if keys and current else b""
        )
        self.on = bool(current)
        if self.on:
            self._seal = self._aead[current].encrypt
            self._head = b"%s%s:" % (_MAGIC_B, current.encode())
            self._prefix, self._count = os.urandom(8), itertools.count()

    @classmethod
    def from_spec(cls, spec: str | None) -> Codec:
        return cls(*parse_keys(spec)) if spec else cls()

    @property
    def key_ids(self) -> list[str]:
        return list(self._aead)

    # --- strings ---
    def seal_str(self, s: str, *, same: bool = False) -> str:
        """``same``: equal strings seal equal (the nonce a keyed hash of the text, under the current key),
        for a value a script compares as stored (a client's tool result sent again: tool_results.lua).
        An empty string holds nothing: kept as it is."""
        if not self.on or not s or (s.startswith(MAGIC) and SEALED.match(s)):
            return s
        return self._sealed(s.encode(), same).decode()

    def _sealed(self, b: bytes, same: bool = False) -> bytes:
        if same:
            nonce = hmac.new(self._siv, b, hashlib.sha256).digest()[:12]
        else:  # 8 random bytes a process (anew every 2**32 nonces) and a counter: unique, no syscall each
            n = next(self._count)
            if n >= 1 << 32:
                self._prefix, self._count = os.urandom(8), itertools.count(1)
                n = 0
            nonce = self._prefix + n.to_bytes(4, "big")
        return self._head + base64.urlsafe_b64encode(nonce + self._seal(nonce, b, None)).rstrip(b"=")

    def open_str(self, s: str) -> str:
        m = SEALED.match(s) if s.startswith(MAGIC) else None
        return s if m is None else self._opened(m).decode()

    def _opened(self, m: re.Match[str]) -> bytes:
        kid = m.group(1)
        aead = self._aead.get(kid)
        if aead is None:
            raise DataKeyError(f"data sealed with key {kid!r}, which AGENTMILL_DATA_KEYS does not list")
        blob = _unb64(m.group(2))
        try:
            return aead.decrypt(blob[:12], blob[12:], None)
        except InvalidTag:
            raise DataKeyError(f"data sealed with key {kid!r} does not open with that key") from None

    # --- JSON values ---
    def seal(self, v: Any) -> Any:
        return _walk(v, self.seal_str) if self.on else v

    def open(self, v: Any) -> Any:
        return _walk(v, self.open_str)

    # --- JSON bytes, as the stores hold them ---
    def seal_json(self, raw: Any) -> Any:
        """A JSON document with its leaves sealed; unchanged without keys or when empty. What is not
        JSON (nothing agentmill stores is not) is sealed whole."""
        if not self.on or not raw:
            return raw
        try:
            doc = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return self._sealed(raw.encode() if isinstance(raw, str) else raw)
        return orjson.dumps(_walk(doc, self.seal_str))

    def open_json(self, raw: Any) -> Any:
        """JSON bytes (or str, or None) with the leaves opened; unchanged when nothing is sealed."""
        if not raw or not _sealed_in(raw):
            return raw
        text = raw.decode() if isinstance(raw, bytes) else raw
        if text.startswith(MAGIC) and (m := SEALED.match(text)):  # sealed whole
            return self._opened(m)
        return orjson.dumps(_walk(orjson.loads(raw), self.open_str))

    def seal_fragment(self, raw: bytes) -> bytes:
        """Comma-joined JSON values (a transcript's appended messages, maybe with a leading comma)."""
        if not self.on or not raw:
            return raw
        lead = b"," if raw[:1] == b"," else b""
        out = orjson.dumps(_walk(orjson.loads(b"[%b]" % raw[len(lead) :]), self.seal_str))
        return lead + out[1:-1]

    def open_fragment(self, raw: Any) -> Any:
        if not raw or not _sealed_in(raw):
            return raw
        b = raw.encode() if isinstance(raw, str) else raw
        lead = b"," if b[:1] == b"," else b""
        return lead + orjson.dumps(_walk(orjson.loads(b"[%b]" % b[len(lead) :]), self.open_str))[1:-1]

    def reseal_text(self, text: str) -> tuple[str, int]:
        """Any text (a JSON document, a JSON string holding JSON, a transcript) with every sealed string
        not under the current key sealed again under it (key rotation), and how many were. The sealed
        strings are found as tokens: their alphabet needs no escaping in JSON, at any depth."""
        if not self.on or MAGIC not in text:
            return text, 0
        n = 0

        def again(m: re.Match[str]) -> str:
            nonlocal n
            if m.group(1) == self.current:
                return m.group(0)
            n += 1
            return self.seal_str(self.open_str(m.group(0)))

        return _TOKEN.sub(again, text), n

    def loads(self, raw: bytes | str) -> Any:
        """orjson.loads with the leaves opened."""
        v = orjson.loads(raw)
        return _walk(v, self.open_str) if _sealed_in(raw) else v


def _sealed_in(raw: bytes | str) -> bool:
    return (_MAGIC_B in raw) if isinstance(raw, bytes) else (MAGIC in raw)


def _walk(v: Any, f: Callable[[str], str], plain: bool = False) -> Any:
    """``v`` with ``f`` applied to each string leaf not under a PLAIN key or a kept tree (JSON from
    orjson: exact types, so ``type(x) is`` tests; the hot path of every sealed commit)."""
    t = type(v)
    if t is dict:
        return _walk_dict(v, f)
    if t is list:
        return _walk_list(v, f, plain)
    if t is str:
        return v if plain else f(v)
    return v


def _walk_dict(d: dict[str, Any], f: Callable[[str], str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, x in d.items():
        t = type(x)
        if t is str:
            out[k] = x if k in PLAIN else f(x)
        elif t is dict:
            out[k] = x if k in KEPT_TREES else _walk_dict(x, f)
        elif t is list:
            out[k] = x if k in KEPT_TREES else _walk_list(x, f, k in PLAIN)
        else:
            out[k] = x
    return out


def _walk_list(xs: list[Any], f: Callable[[str], str], plain: bool) -> list[Any]:
    return [
        (x if plain else f(x)) if (t := type(x)) is str else _walk_dict(x, f) if t is dict
        else _walk_list(x, f, plain) if t is list else x
        for x in xs
    ]  # fmt: skip


_active: Codec | None = None


def install(spec: str | None) -> Codec:
    """The process's codec, from its settings' data keys (a process starting: the API, a worker)."""
    global _active
    _active = Codec.from_spec(spec)
    return _active


def active() -> Codec:
    """The process's codec; the environment's settings when none was installed."""
    if _active is None:
        from shared.settings import get_settings

        return install(get_settings().data_keys)
    return _active


def loads(raw: bytes | str) -> Any:
    """orjson.loads with sealed leaves opened by the process's codec (a read boundary)."""
    return active().loads(raw)


def open_bytes(raw: Any) -> Any:
    """Stored JSON bytes (or None) with sealed leaves opened by the process's codec."""
    return active().open_json(raw)
