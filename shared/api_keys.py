"""Managed API keys and read tokens, pure: what a key looks like, the keyed hash stored for it, its
scopes, and the signed read tokens of one run's events. No I/O (producer/key_store.py keeps the keys
in Redis; producer/api/auth.py checks them per request).

A key is ``amk_<id>_<secret>``: the id names its hash in Redis (keys.Partition.api_key), which holds
HMAC-SHA256(key secret, secret) and never the key, compared in constant time. A read token is
``amr_<payload>.<signature>``, the payload naming one run, its tenant and an expiry: stateless,
valid only for that run's events until then.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from enum import StrEnum

import orjson

from shared.settings import Settings

__all__ = [
    "ALL_SCOPES",
    "KEY_PREFIX",
    "READ_TOKEN_PREFIX",
    "ReadToken",
    "Scope",
    "digest",
    "key_secret",
    "mint_key",
    "parse_duration",
    "parse_key",
    "parse_scopes",
    "sign_read_token",
    "verify_read_token",
]

KEY_PREFIX = "amk_"
READ_TOKEN_PREFIX = "amr_"
DEV_KEY_SECRET = "agentmill-dev-id-secret"  # the ID secret's public development key: dev only
_KEY = re.compile(r"^amk_([0-9a-f]{16})_([A-Za-z0-9_-]{20,100})\Z")
_DURATION = re.compile(r"^([0-9]{1,6})([smhd])\Z")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


class Scope(StrEnum):
    """What a key may do; each route of the API needs exactly one (producer/api/scopes.py)."""

    READ = "read"  # GETs and event streams
    SUBMIT = "submit"  # runs, batches, schedules, client tool results
    CONTROL = "control"  # abort, approvals, retry, fork
    ADMIN = "admin"  # the tenant's keys and audit log
    OPERATOR = "operator"  # admin of every tenant (only an operator may grant it)


ALL_SCOPES = frozenset(Scope)


def key_secret(settings: Settings) -> bytes:
    """The HMAC key of stored key hashes and read tokens: AGENTMILL_KEY_SECRET, else one derived
    from AGENTMILL_ID_SECRET (or its public development key)."""
    if settings.key_secret:
        return settings.key_secret.encode()
    base = (settings.id_secret or DEV_KEY_SECRET).encode()
    return hmac.new(base, b"agentmill api keys", hashlib.sha256).digest()


def digest(secret: bytes, key_part: str) -> str:
    """The keyed hash stored for a key's secret part."""
    return hmac.new(secret, key_part.encode(), hashlib.sha256).hexdigest()


def mint_key() -> tuple[str, str, str]:
    """A new key: (key id, its secret part, the whole key to hand out once)."""
    key_id, part = secrets.token_hex(8), secrets.token_urlsafe(32)
    return key_id, part, f"{KEY_PREFIX}{key_id}_{part}"


def parse_key(token: str) -> tuple[str, str] | None:
    """(key id, secret part) of a managed key, or None when ``token`` is not one."""
    m = _KEY.match(token)
    return (m.group(1), m.group(2)) if m else None


def parse_scopes(spec: str) -> frozenset[Scope]:
    """``read,submit`` -> the scopes; ValueError naming an unknown one, or for none."""
    names = [s.strip() for s in spec.split(",") if s.strip()]
    unknown = [n for n in names if n not in ALL_SCOPES]
    if unknown or not names:
        raise ValueError(
            f"scopes: {', '.join(unknown) or '(none)'} is not one of {', '.join(s.value for s in Scope)}"
        )
    return frozenset(Scope(n) for n in names)


def parse_duration(spec: str) -> int:
    """``30d``, ``12h``, ``90m``, ``45s`` -> seconds; ValueError otherwise."""
    m = _DURATION.match(spec.strip())
    if not m or int(m.group(1)) == 0:
        raise ValueError(f"{spec!r} is not a duration such as 30d, 12h, 90m or 45s")
    return int(m.group(1)) * _UNIT_S[m.group(2)]


@dataclass(frozen=True, slots=True)
class ReadToken:
    """What a valid read token grants: reading ``run_id``'s events as ``tenant`` until ``expires_ms``."""

    run_id: str
    tenant: str
    expires_ms: int


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _signature(secret: bytes, payload: str) -> str:
    return _b64(hmac.new(secret, b"read-token\0" + payload.encode(), hashlib.sha256).digest())


def sign_read_token(secret: bytes, grant: ReadToken) -> str:
    payload = _b64(orjson.dumps({"r": grant.run_id, "t": grant.tenant, "e": grant.expires_ms}))
    return f"{READ_TOKEN_PREFIX}{payload}.{_signature(secret, payload)}"


def verify_read_token(secret: bytes, token: str, now_ms: int) -> ReadToken | str:
    """The grant of a valid token; else why not: ``invalid`` (not one, or a bad signature) or
    ``expired``."""
    if not token.startswith(READ_TOKEN_PREFIX) or len(token) > 2048:
        return "invalid"
    payload, _, sig = token[len(READ_TOKEN_PREFIX) :].partition(".")
    if not hmac.compare_digest(sig.encode(), _signature(secret, payload).encode()):
        return "invalid"
    try:
        raw = orjson.loads(_unb64(payload))
        grant = ReadToken(str(raw["r"]), str(raw["t"]), int(raw["e"]))
    except (ValueError, KeyError, TypeError):
        return "invalid"
    return grant if grant.expires_ms > now_ms else "expired"
