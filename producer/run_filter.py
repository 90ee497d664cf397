"""What a listing asks for: a run filter, checked into the index dimensions it intersects, and the
error a filter or cursor that cannot be used raises. A value of its own, so the listing
(producer.listing) and the archive's reads (producer.archived) both take it without importing each
other."""

from __future__ import annotations

from dataclasses import dataclass

from agentmill_client.ids import is_valid_id
from agentmill_client.models import RunStatus

__all__ = ["STATUSES", "ListingError", "RunFilter"]

STATUSES = tuple(s.value for s in RunStatus)


class ListingError(ValueError):
    """A filter or cursor that cannot be used; ``field`` names the query parameter."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


@dataclass(frozen=True, slots=True)
class RunFilter:
    status: str | None = None
    agent: str | None = None
    session_id: str | None = None
    batch_id: str | None = None
    metadata: tuple[str, ...] = ()  # "key=value" terms, as producer.submission.meta_term writes them
    created_after: int | None = None  # ms, exclusive
    created_before: int | None = None  # ms, exclusive
    parent_run_id: str | None = None  # a parent's child runs (sub-agents); the id its keys use

    def pairs(self) -> list[str]:
        """(dimension, value) pairs of the indexes to intersect, flattened."""
        out: list[str] = []
        if self.status is not None:
            if self.status not in STATUSES:
                raise ListingError("status", f"one of {', '.join(STATUSES)}")
            out += ["status", self.status]
        if self.agent is not None:
            out += ["agent", self.agent]
        for name, value, dim in (
            ("sessionId", self.session_id, "session"),
            ("batchId", self.batch_id, "batch"),
            ("parentRunId", self.parent_run_id, "parent"),
        ):
            if value is not None:
                if not is_valid_id(value):
                    raise ListingError(name, "not a valid id")
                out += [dim, value]
        for term in self.metadata:
            if "=" not in term or term.startswith("="):
                raise ListingError("metadata", f"{term!r} is not key=value")
            out += ["meta", term]
        return out
