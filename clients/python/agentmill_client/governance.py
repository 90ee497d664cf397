"""Managed API keys, read tokens and the audit log on the wire: what ``/v1/keys``,
``POST /v1/runs/{id}/token`` and ``GET /v1/audit`` take and answer. Attributes are snake_case, the
JSON camelCase (base.Model, base.Answer)."""

from __future__ import annotations

from pydantic import Field

from agentmill_client.base import Answer, Model

__all__ = [
    "AuditEntry",
    "AuditPage",
    "KeyCreated",
    "KeyInput",
    "KeyView",
    "KeysPage",
    "ReadTokenAnswer",
    "ReadTokenBody",
    "RevokeAnswer",
]


class KeyInput(Model):
    """``POST /v1/keys``."""

    scopes: list[str] = Field(
        min_length=1,
        max_length=5,
        description="any of read, submit, control, admin (operator: operators only)",
    )
    name: str = Field(
        default="", max_length=100, description="a name to know it by in listings and the audit log"
    )
    expires_in_s: int | None = Field(
        default=None, ge=1, le=10 * 366 * 86400, strict=True, description="seconds from now; absent: never"
    )
    tenant: str | None = Field(
        default=None, max_length=100, description="an operator's key for another tenant; absent: the caller's"
    )


class KeyView(Answer):
    """A managed key as listed: never the key itself."""

    key_id: str
    tenant: str
    name: str = ""
    scopes: list[str]
    created_at: int = Field(description="ms since the epoch")
    created_by: str = ""
    expires_at: int | None = Field(default=None, description="ms since the epoch; null: never")
    revoked_at: int | None = Field(default=None, description="ms since the epoch; null: not revoked")
    last_used_at: int | None = Field(
        default=None, description="ms since the epoch, to within a minute; null: never used"
    )


class KeyCreated(KeyView):
    """``POST /v1/keys``: the key, shown this once."""

    key: str = Field(description="the bearer token; only its keyed hash is stored")


class KeysPage(Answer):
    keys: list[KeyView]


class RevokeAnswer(Answer):
    key_id: str
    result: str = Field(description="revoked | already_revoked")


class ReadTokenBody(Model):
    """``POST /v1/runs/{id}/token``."""

    ttl_s: int = Field(default=600, ge=1, strict=True, description="the token's life in seconds")


class ReadTokenAnswer(Answer):
    token: str = Field(description="give as ?token= on GET /v1/runs/{id}/events; good for nothing else")
    run_id: str
    expires_at: int = Field(description="ms since the epoch")
    events_url: str


class AuditEntry(Answer):
    """One control action of a tenant."""

    id: str = Field(description="the entry's id: its place in the log")
    at: int = Field(description="ms since the epoch")
    action: str
    target: str
    actor: str = Field(description="the key id, or token-file")
    actor_name: str = ""
    tenant: str
    request_id: str = ""
    detail: str = ""


class AuditPage(Answer):
    entries: list[AuditEntry]
    next: str | None = Field(default=None, description="the cursor of the next page; null: no more")
