"""What a submission is, pure: its error and its answer, the ids it is named by (idempotency keys,
batches, tenant scoping), its input hash and the metadata terms it is listed under."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from pydantic import ValidationError

from shared import limits
from shared.codec import to_jsonable
from shared.models import RunInput
from shared.scripts import text

__all__ = [
    "ForeignRunError",
    "ForeignSessionError",
    "Prepared",
    "SubmissionError",
    "Submitted",
    "batch_run_prefix",
    "claimed_id",
    "claimed_session",
    "counted",
    "input_hash",
    "meta_term",
    "meta_terms",
    "outcome",
    "run_id_for_key",
    "scoped_id",
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


def scoped_id(tenant: str, client_id: str) -> str:
    """The id a tenant's run or session takes when its own id is held by another tenant: ids are
    scoped by tenant, so another tenant's id answers like a free one and cannot be squatted."""
    return "tsc_" + hashlib.sha256(f"{tenant}\0{client_id}".encode()).hexdigest()[:40]


class ForeignRunError(SubmissionError):
    """The runId is held by another tenant (a 409 only if the scoped id is held as well)."""


class ForeignSessionError(SubmissionError):
    """The sessionId is held by another tenant."""


def outcome(run: RunInput, reply: Sequence[Any], run_id: str | None = None) -> Submitted:
    """A SUBMIT verdict as the run's answer; a refusal raises its SubmissionError."""
    verdict, status = text(reply[0]), text(reply[1])
    rid = run_id or run.run_id or ""
    if verdict == "conflict":
        cls = ForeignRunError if status == "" else SubmissionError  # '' : another tenant's run
        raise cls("conflict", f"run {rid} already exists with a different input", status=409, field="runId")
    if verdict == "unknown_session" and run.auto_create_session and run.session_id:
        raise ForeignSessionError(  # it would have been created: another tenant holds the id
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
        raise SubmissionError(
            "session_busy",
            f"session {run.session_id} is running {status} and multitaskStrategy is reject",
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


def input_hash(run: RunInput) -> str:
    body = to_jsonable(run)
    body.pop("runId", None)
    return hashlib.sha256(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)).hexdigest()


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
    """One valid run, encoded once for its submit script."""

    run: RunInput
    run_id: str
    session_id: str
    body: bytes
    digest: str


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
