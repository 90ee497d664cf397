"""A submission's answer, pure: the run it made (Submitted) or why it was refused (SubmissionError),
from the submit scripts' verdicts and from validation."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from agentmill_client.models import RunInput
from producer.scope import SCOPED_PREFIX
from shared.calls.submission import SubmitVerdict
from shared.replies import text

__all__ = ["SubmissionError", "Submitted", "outcome", "reserved_id_error", "validation_error"]


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
    verdict, status = SubmitVerdict(text(reply[0])), text(reply[1])
    rid = run_id or run.run_id or ""
    if verdict is SubmitVerdict.CONFLICT:
        raise SubmissionError("conflict", f"run {rid} already exists with a different input", status=409,
                              field="runId")  # fmt: skip
    if verdict is SubmitVerdict.DELETED:
        raise SubmissionError("run_deleted", f"run {rid} was deleted; its id is not used again", status=409,
                              field="runId")  # fmt: skip
    if verdict is SubmitVerdict.UNKNOWN_SESSION and run.auto_create_session and run.session_id:
        raise SubmissionError(  # it would have been created: the default tenant's id another holds
            "unknown_session", f"sessionId: no session {run.session_id!r}", status=404, field="sessionId"
        )
    if verdict is SubmitVerdict.UNKNOWN_SESSION:
        raise SubmissionError(
            "unknown_session",
            f"sessionId: no session {run.session_id!r}; set autoCreateSession to create it",
            status=404,
            field="sessionId",
        )
    if verdict is SubmitVerdict.BATCH_FINISHED:
        raise SubmissionError(
            "batch_finished",
            "the batch has finished (its last part came without more: true) and takes no new runs",
            status=409,
            field="batchId",
        )
    if verdict is SubmitVerdict.CONCURRENCY_FULL:
        key = run.concurrency.key if run.concurrency is not None else ""
        raise SubmissionError(
            "concurrency_full",
            f"concurrency.key {key!r} has as many runs waiting as a key may have "
            "(AGENTMILL_KEY_MAX_WAITING); retry once some have started",
            status=429,
            field="concurrency.key",
            retry_after_s=1,
        )
    if verdict is SubmitVerdict.SESSION_BUSY:
        active = "another run" if status.startswith(SCOPED_PREFIX) else status  # not its key
        raise SubmissionError(
            "session_busy",
            f"session {run.session_id} is running {active} and multitaskStrategy is reject",
            status=409,
            field="multitaskStrategy",
        )
    return Submitted(run_id=rid, status=status, created=verdict is SubmitVerdict.CREATED)


def validation_error(exc: ValidationError) -> SubmissionError:
    """Turn pydantic's error into one message naming the field (camelCase path)."""
    parts = []
    first_field = None
    for err in exc.errors()[:5]:
        loc = ".".join(str(p) for p in err["loc"]) or "body"
        first_field = first_field or loc
        parts.append(f"{loc}: {err['msg']}")
    return SubmissionError("invalid_input", "; ".join(parts), field=first_field)
