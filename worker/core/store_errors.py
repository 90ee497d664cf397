"""Why a run store refused a write: the run is another worker's now (or gone), or another writer's
event got onto the stream first. Raised by every ``RunStore`` (worker/ports.py)."""

from __future__ import annotations

__all__ = ["FencedError", "SeqConflictError"]


class FencedError(Exception):
    """This worker no longer owns the run; it must stop without writing. ``deleted``: the run is gone
    (deleted, or expired): its job leaves no result behind either."""

    def __init__(self, message: str, *, deleted: bool = False) -> None:
        super().__init__(message)
        self.deleted = deleted


class SeqConflictError(Exception):
    """The stream's last seq is not what this writer expected (another writer got in)."""
