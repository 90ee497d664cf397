"""A listed run's row, declared once: ``ListingRow``'s fields, in order, are what a listing reads
of each run, wherever the run is kept.

- Redis: list_runs.lua reads them with one ``HMGET`` of the run hash; its field list is the token
  ``__LISTING_FIELDS__``, which ``shared.scripts.render`` fills in from ``hash_fields``.
- The archive: ``select_list`` is the SQL select list of the same values, read from the run's
  ``record`` (the whole run hash as it ended), so an archived run's row is what its hash gave.
- Python: ``ListingRow.parse`` reads a reply's row into the fields by name.

A field added here reaches all three; its hash field is named by its metadata (``hash_field``).
The first field is the run's id (the index entry, not a hash field); the second is its status,
which list_runs.lua takes as the mark of a hash that still exists.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from shared.fields import RunField as F

__all__ = ["ListingRow", "hash_fields", "select_list"]

_HASH = "hash_field"


def _col(f: F) -> Any:
    return dataclasses.field(metadata={_HASH: f.value})


@dataclass(frozen=True, slots=True)
class ListingRow:
    """One listed run, each value as its run hash holds it ('' when it holds none)."""

    run_id: str  # the id its keys use (the index's entry)
    status: str = _col(F.STATUS)
    created_at: str = _col(F.CREATED_AT)
    session_id: str = _col(F.SESSION_ID)
    agent: str = _col(F.AGENT)
    batch: str = _col(F.BATCH)
    finished_at: str = _col(F.FINISHED_AT)
    client_id: str = _col(F.CLIENT_ID)  # the id its tenant knows it by, when not run_id
    iterations: str = _col(F.ITERATIONS)
    error_code: str = _col(F.ERROR_CODE)
    lineage: str = _col(F.LINEAGE)
    retried_by: str = _col(F.RETRIED_BY)
    priority: str = _col(F.PRIORITY)
    run_at: str = _col(F.RUN_AT)

    @classmethod
    def width(cls) -> int:
        """How many values a row is in a reply."""
        return len(dataclasses.fields(cls))

    @classmethod
    def parse(cls, values: Sequence[Any]) -> ListingRow:
        """A row from ``width()`` reply values, in the declared order (bytes or str)."""
        if len(values) != cls.width():
            raise ValueError(f"a listing row has {cls.width()} values, not {len(values)}")
        return cls(*(_text(v) for v in values))

    def values(self) -> list[str]:
        """The row as a reply holds it, in the declared order."""
        return [getattr(self, f.name) for f in dataclasses.fields(self)]


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode()
    return "" if value is None else str(value)


def hash_fields(row: type[ListingRow] = ListingRow) -> tuple[str, ...]:
    """The run hash fields list_runs.lua reads, in order (every field of ``row`` but the id)."""
    out = tuple(f.metadata[_HASH] for f in dataclasses.fields(row)[1:])
    if out[:1] != (F.STATUS.value,):
        raise ValueError("a listing row's first hash field must be the status (the hash's existence)")
    return out


def select_list(row: type[ListingRow] = ListingRow) -> str:
    """The archive's SQL select list of a row, in order: the id its keys used, then each hash field
    from the run's ``record`` ('' when absent), named as the row's fields."""
    cols = ["key_id AS run_id"]
    for f in dataclasses.fields(row)[1:]:
        cols.append(f"coalesce(record->>'{f.metadata[_HASH]}', '') AS {f.name}")
    return ", ".join(cols)
