"""The settings of managed API keys, read tokens and the audit log (docs/operations.md#api-keys): the
key of their keyed hashes and signatures, and how much audit history Redis keeps; and the data keys of
encryption at rest (docs/operations.md#encryption-at-rest). ``Settings`` (shared/settings.py) holds
them with the rest."""

from __future__ import annotations

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from shared.data_keys import parse_keys

__all__ = ["KeySettings"]


class KeySettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="AGENTMILL_", extra="ignore", populate_by_name=True)

    key_secret: str | None = Field(
        default=None,
        description="HMAC key of managed API keys' stored hashes and of read tokens' signatures: the same "
        "on every API process and for `agentmill keys`; changing it invalidates every managed key and read "
        "token; unset: derived from `AGENTMILL_ID_SECRET` (or its public development key)",
    )
    max_keys_per_tenant: int = Field(
        default=1_000, ge=1, description="managed API keys (revoked ones included) a tenant may hold"
    )
    read_token_max_ttl_s: int = Field(
        default=86_400, ge=1, description="the longest life a read token (`POST /v1/runs/{id}/token`) may ask"
    )
    audit_max_entries: int = Field(
        default=100_000,
        ge=100,
        description="audit entries Redis keeps per tenant (about: the stream is trimmed with `MAXLEN ~`); the "
        "archive, when on, keeps every entry",
    )
    data_keys: str | None = Field(
        default=None,
        description="payload encryption at rest: `KEYID:BASE64,KEYID:BASE64` (32-byte keys, the first the "
        "current one, used for new writes; every listed key reads what it sealed), or `@/path` of a file "
        "holding the same; the same list on every process; unset: payloads are stored as they are "
        "(docs/operations.md#encryption-at-rest)",
    )

    @field_validator("data_keys")
    @classmethod
    def _data_keys_parse(cls, value: str | None) -> str | None:
        if value:
            parse_keys(value)  # a ValueError names what is wrong
        return value or None
