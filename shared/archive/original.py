"""An archived run as a retry or fork reads it (producer/restore.py), once archiving dropped its input
and checkpoint from its Redis hash or Redis forgot it: its row (the input, the run hash as it ended,
its item index), its events up to a seq and its tool records; and the one write the archive takes
after a run's row, a retry taking the run's place in its batch (the field ``batch`` emptied and
``retriedBy`` set in the kept hash, as batch_replace.lua does to a hash in Redis), at most once."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from shared.archive.store import ArchiveStore
from shared.fields import RunField

__all__ = ["ArchivedOriginal", "leave_batch", "original"]

F = RunField


@dataclass(frozen=True, slots=True)
class ArchivedOriginal:
    key_id: str
    created_at: int
    tenant: str
    status: str
    input: str | None  # the RunInput JSON
    record: dict[str, str]  # the run hash as it ended (with a later leave_batch's change)
    item_index: int | None
    last_seq: int
    stream_key: str
    events: list[tuple[int, str, str]]  # seq, kind, payload JSON: those up to the seq asked for
    first_seq: int | None  # the first event the archive kept (None: it kept none)
    tools: dict[str, str]  # tool call id -> ToolRecord JSON


async def original(
    store: ArchiveStore, ids: Sequence[str], tenant: str, upto: int
) -> ArchivedOriginal | None:
    """``tenant``'s first run kept under ``ids`` (of several under one id, the newest) with its
    events up to seq ``upto`` (none for 0) and its tool records; None when the archive has none."""
    rows = await store.fetch(
        "SELECT DISTINCT ON (key_id) key_id, created_at, tenant, status, input, record::text AS record, "
        "item_index, last_seq, stream_key FROM runs WHERE key_id = ANY($1::text[]) AND tenant = $2 "
        "ORDER BY key_id, created_at DESC",
        list(ids),
        tenant,
    )
    by_id = {r["key_id"]: r for r in rows}
    row = next((by_id[i] for i in ids if i in by_id), None)
    if row is None:
        return None
    key_id, created_at = row["key_id"], int(row["created_at"])
    tools = await store.fetch(
        "SELECT tool_call_id, record FROM run_tools WHERE key_id = $1 AND created_at = $2", key_id, created_at
    )
    first = await store.fetch(
        "SELECT min(seq) AS first FROM run_events WHERE key_id = $1 AND created_at = $2", key_id, created_at
    )
    events = []
    if upto > 0:
        events = await store.fetch(
            "SELECT seq, kind, payload FROM run_events WHERE key_id = $1 AND created_at = $2 AND seq <= $3 "
            "ORDER BY seq",
            key_id,
            created_at,
            upto,
        )
    record: dict[str, Any] = orjson.loads(row["record"])
    return ArchivedOriginal(
        key_id=key_id,
        created_at=created_at,
        tenant=row["tenant"],
        status=row["status"],
        input=row["input"],
        record={str(k): str(v) for k, v in record.items()},
        item_index=int(row["item_index"]) if row["item_index"] is not None else None,
        last_seq=int(row["last_seq"]),
        stream_key=row["stream_key"],
        events=[(int(e["seq"]), e["kind"], e["payload"]) for e in events],
        first_seq=int(first[0]["first"]) if first and first[0]["first"] is not None else None,
        tools={t["tool_call_id"]: t["record"] for t in tools},
    )


async def leave_batch(store: ArchiveStore, o: ArchivedOriginal, batch_id: str, retry_id: str) -> bool:
    """The retry ``retry_id`` takes ``o``'s place in batch ``batch_id``: True for the one call that
    did it, False when a retry took it before (or the run is no longer in the batch). The row keeps
    its batch and item index (it stays in the batch's run listing, naming its retry; the batch's
    reads count the newest run of an item index)."""
    done = await store.fetch(
        "UPDATE runs SET record = record || jsonb_build_object($4::text, '', $5::text, $6::text) "
        "WHERE key_id = $1 AND created_at = $2 AND tenant = $3 AND record->>$4::text = $7 RETURNING 1",
        o.key_id,
        o.created_at,
        o.tenant,
        str(F.BATCH),
        str(F.RETRIED_BY),
        retry_id,
        batch_id,
    )
    return bool(done)
