"""The ids a submission is named by, pure: the keys a tenant's ids are kept under (Scope), the ids
an Idempotency-Key and a batch name, and the ids an item claims before it is validated."""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from typing import Any

from agentmill_client.models import RunInput
from shared import keys
from shared.keys import SCOPED_PREFIX
from shared.quotas import DEFAULT_TENANT
from shared.settings import Settings

__all__ = [
    "DEV_ID_SECRET",
    "SCOPED_PREFIX",
    "Scope",
    "batch_run_prefix",
    "claimed_home",
    "claimed_id",
    "claimed_key",
    "claimed_session",
    "run_id_for_key",
]

DEV_ID_SECRET = "agentmill-dev-id-secret"  # the key when AGENTMILL_ID_SECRET is unset (public: dev only)


@dataclass(frozen=True, slots=True)
class Scope:
    """The ids one tenant's runs and sessions are kept under. A named tenant's id ``x`` (chosen by
    its client or made for it: generated, Idempotency-Key and batch item ids, auto sessions) is kept
    as ``tsc_`` + HMAC(AGENTMILL_ID_SECRET, tenant, x): no global id exists that another tenant could
    take first, and no key says whether another tenant holds an id. The default tenant (auth off,
    the Python producer) keeps its ids as they are."""

    tenant: str
    secret: bytes

    @classmethod
    def of(cls, settings: Settings, tenant: str) -> Scope:
        return cls(tenant, (settings.id_secret or DEV_ID_SECRET).encode())

    @property
    def bare(self) -> bool:
        return self.tenant == DEFAULT_TENANT

    def key(self, client_id: str) -> str:
        """The id the keys of this tenant's run or session ``client_id`` use ('' stays '')."""
        if not client_id or self.bare:
            return client_id
        mac = hmac.new(self.secret, f"{self.tenant}\0{client_id}".encode(), hashlib.sha256)
        return SCOPED_PREFIX + mac.hexdigest()[:40]

    def lookups(self, client_id: str) -> list[str]:
        """The ids this tenant's ``client_id`` may be kept under, newest form first: its key, then
        the forms of before AGENTMILL_ID_SECRET (the id itself, or sha256 of tenant and id when
        another tenant held it) for runs and sessions stored then. Each answers only for a run of
        this tenant (the caller checks), so another tenant's holding none of them shows."""
        if self.bare:
            return [client_id]
        legacy = SCOPED_PREFIX + hashlib.sha256(f"{self.tenant}\0{client_id}".encode()).hexdigest()[:40]
        return [self.key(client_id), client_id, legacy]

    def batch_delivery(self, batch_id: str) -> str:
        """The X-Agentmill-Delivery id of this tenant's batch: stable, and naming no tenant or key."""
        mac = hmac.new(self.secret, f"batch\0{self.tenant}\0{batch_id}".encode(), hashlib.sha256)
        return "bat_" + mac.hexdigest()[:40]


def run_id_for_key(tenant: str, idempotency_key: str) -> str:
    """A client's Idempotency-Key names exactly one run of its tenant."""
    return "run_" + hashlib.sha256(f"{tenant}\0{idempotency_key}".encode()).hexdigest()[:32]


def batch_run_prefix(tenant: str, batch_id: str) -> str:
    """A batch names its runs too: item ``i`` of it is always run ``<prefix><i>`` (unique per tenant
    and batch, as run_id_for_key's ids are per tenant and key)."""
    return "run_" + hashlib.sha256(f"{tenant}\0batch\0{batch_id}".encode()).hexdigest()[:32] + "_"


def claimed_id(raw: RunInput | dict[str, Any]) -> str | None:
    """The runId an item names, before it is validated (quota admission counts it by this id)."""
    rid = raw.run_id if isinstance(raw, RunInput) else raw.get("runId") if isinstance(raw, dict) else None
    return rid if isinstance(rid, str) and rid else None


def claimed_key(raw: RunInput | dict[str, Any], field: str) -> str:
    """The key of an item's ``field`` (concurrency, debounce), before it is validated ('' = none)."""
    if isinstance(raw, RunInput):
        c = getattr(raw, field)
        return c.key if c is not None else ""
    c = raw.get(field) if isinstance(raw, dict) else None
    key = c.get("key") if isinstance(c, dict) else None
    return key if isinstance(key, str) else ""


def claimed_home(raw: RunInput | dict[str, Any], run_id: str, scope: Scope) -> str:
    """The id whose home partition an item's run lives at (producer.placement), before it is
    validated: its session's key, else its concurrency key's (keys.conc_home), else its debounce
    key's (keys.debounce_home), else '' (its own)."""
    if sid := claimed_session(raw, run_id):
        return scope.key(sid)
    if conc := claimed_key(raw, "concurrency"):
        return keys.conc_home(conc)
    deb = claimed_key(raw, "debounce")
    return keys.debounce_home(deb) if deb else ""


def claimed_session(raw: RunInput | dict[str, Any], run_id: str) -> str:
    """The session an item names (or creates, named after its run), before it is validated ('' = none):
    where its run will live (producer.placement)."""
    if isinstance(raw, RunInput):
        sid, auto = raw.session_id, raw.auto_create_session
    elif isinstance(raw, dict):
        sid, auto = (
            raw.get("sessionId", raw.get("session_id")),
            raw.get("autoCreateSession", raw.get("auto_create_session")),
        )
    else:
        return ""
    if isinstance(sid, str) and sid:
        return sid
    return f"ses_{run_id}" if auto is True else ""
