"""What a submission is, pure: its error and its answer, the ids it is named by (idempotency keys,
batches, the keys a tenant's ids are kept under), its input hash and the metadata terms it is
listed under."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from pydantic import ValidationError

from shared import limits
from shared.models import RunInput
from shared.quotas import DEFAULT_TENANT
from shared.scripts import text
from shared.settings import Settings

__all__ = [
    "DEV_ID_SECRET",
    "SCOPED_PREFIX",
    "Prepared",
    "Scope",
    "SubmissionError",
    "Submitted",
    "batch_run_prefix",
    "claimed_id",
    "claimed_session",
    "counted",
    "meta_term",
    "meta_terms",
    "outcome",
    "reserved_id_error",
    "run_id_for_key",
    "validation_error",
]


class SubmissionError(Exception):
    """A run that was not accepted. ``code`` is stable; ``status`` is the HTTP status it maps to."""

    def __init__(
        self,
        code: str,
        message: str,
        *,
        status: int = 422,
        field: str | None = None,
        retry_after_s: int | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status
        self.field = field
        self.retry_after_s = retry_after_s

    def as_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.field:
            d["field"] = self.field
        return d


@dataclass(frozen=True, slots=True)
class Submitted:
    run_id: str
    status: str
    created: bool


SCOPED_PREFIX = "tsc_"  # the ids a named tenant's runs and sessions are kept under; no client id has it
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


def reserved_id_error(run: RunInput) -> SubmissionError | None:
    """A runId or sessionId in the form the server keeps ids under: refused, so that no client
    names a key itself."""
    for field, value in (("runId", run.run_id), ("sessionId", run.session_id)):
        if value and value.startswith(SCOPED_PREFIX):
            return SubmissionError(
                "reserved_id", f"{field}: ids starting with {SCOPED_PREFIX!r} are reserved", field=field
            )
    return None


def outcome(run: RunInput, reply: Sequence[Any], run_id: str | None = None) -> Submitted:
    """A SUBMIT verdict as the run's answer; a refusal raises its SubmissionError. ``run`` and
    ``run_id``: as the client knows them (errors name its ids, never their keys)."""
    verdict, status = text(reply[0]), text(reply[1])
    rid = run_id or run.run_id or ""
    if verdict == "conflict":
        raise SubmissionError("conflict", f"run {rid} already exists with a different input", status=409,
                              field="runId")  # fmt: skip
    if verdict == "unknown_session" and run.auto_create_session and run.session_id:
        raise SubmissionError(  # it would have been created: the default tenant's id another holds
            "unknown_session", f"sessionId: no session {run.session_id!r}", status=404, field="sessionId"
        )
    if verdict == "unknown_session":
        raise SubmissionError(
            "unknown_session",
            f"sessionId: no session {run.session_id!r}; set autoCreateSession to create it",
            status=404,
            field="sessionId",
        )
    if verdict == "batch_finished":
        raise SubmissionError(
            "batch_finished",
            "the batch has finished (its last part came without more: true) and takes no new runs",
            status=409,
            field="batchId",
        )
    if verdict == "session_busy":
        active = "another run" if status.startswith(SCOPED_PREFIX) else status  # not its key
        raise SubmissionError(
            "session_busy",
            f"session {run.session_id} is running {active} and multitaskStrategy is reject",
            status=409,
            field="multitaskStrategy",
        )
    return Submitted(run_id=rid, status=status, created=verdict == "created")


def validation_error(exc: ValidationError) -> SubmissionError:
    """Turn pydantic's error into one message naming the field (camelCase path)."""
    parts = []
    first_field = None
    for err in exc.errors()[:5]:
        loc = ".".join(str(p) for p in err["loc"]) or "body"
        first_field = first_field or loc
        parts.append(f"{loc}: {err['msg']}")
    return SubmissionError("invalid_input", "; ".join(parts), field=first_field)


def run_id_for_key(tenant: str, idempotency_key: str) -> str:
    """A client's Idempotency-Key names exactly one run of its tenant."""
    return "run_" + hashlib.sha256(f"{tenant}\0{idempotency_key}".encode()).hexdigest()[:32]


def batch_run_prefix(tenant: str, batch_id: str) -> str:
    """A batch names its runs too: item ``i`` of it is always run ``<prefix><i>`` (unique per tenant
    and batch, as run_id_for_key's ids are per tenant and key)."""
    return "run_" + hashlib.sha256(f"{tenant}\0batch\0{batch_id}".encode()).hexdigest()[:32] + "_"


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
    elif isinstance(value, int | float):
        v = orjson.dumps(value).decode()
    elif isinstance(value, str):
        v = value
    else:
        return None
    if len(key) > limits.MAX_META_KEY_CHARS or len(v) > limits.MAX_META_VALUE_CHARS:
        return None
    return f"{key}={v}"


@dataclass(frozen=True, slots=True)
class Prepared:
    """One valid run, encoded once for its submit script: ``run`` as its client knows it, ``run_id``
    and ``session_id`` the ids its keys use, ``client_id`` and ``client_session`` the ids its client
    knows them by when those differ ('' otherwise)."""

    run: RunInput
    run_id: str
    session_id: str
    body: bytes
    digest: str
    client_id: str = ""
    client_session: str = ""


def claimed_id(raw: RunInput | dict[str, Any]) -> str | None:
    """The runId an item names, before it is validated (quota admission counts it by this id)."""
    rid = raw.run_id if isinstance(raw, RunInput) else raw.get("runId") if isinstance(raw, dict) else None
    return rid if isinstance(rid, str) and rid else None


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


def counted(items: list[str]) -> list[Any]:
    return [len(items), *items]
