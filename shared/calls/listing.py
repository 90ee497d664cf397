"""The listing's call (producer/listing.py): a page of a tenant's runs on one partition."""

from __future__ import annotations

from dataclasses import dataclass

from shared.calls.base import ScriptCall
from shared.keys import Partition

__all__ = ["ListRuns"]


@dataclass(frozen=True, slots=True)
class ListRuns(ScriptCall):
    """list_runs.lua: a page of ``tenant``'s runs, newest first, after the cursor, at most ``scan_max``
    reads; answers the next cursor (score, id; '' at the end), then per run its listing row
    (shared.listing_row). ``filters``: dimension, value pairs (the indexes walked)."""

    SCRIPT = "list_runs"
    KEY_NAMES = ()  # the indexes are named by the arguments

    tenant: str
    limit: int
    scan_max: int
    cursor_score: str  # '' = the first page
    cursor_id: str
    created_after: int | None  # ms, exclusive (None = none)
    created_before: int | None
    n_filters: int
    filters: tuple[str, ...]

    def keys(self, part: Partition) -> list[str]:
        return []
