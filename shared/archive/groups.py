"""Reads of groups of archived runs, each one query: a batch's counters and usage totals (its runs
counted by status, as a batch's hash in Redis counts them), a session's runs with the run loops
they added to its history, and the ids the clients know archived runs by. The API reads them once
Redis no longer has the batch or the session (producer.archived, producer.sessions)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from shared.archive.store import ArchiveStore
from shared.fields import RunField

__all__ = ["BatchRow", "SessionRun", "batch_rows", "client_ids", "session_runs"]

F = RunField


@dataclass(frozen=True, slots=True)
class BatchRow:
    """A batch's archived runs of one status: how many, their creation and ending times, and
    their usage totals (``cost``: None when none had a price)."""

    status: str
    runs: int
    first_created: int
    last_finished: int
    input_tokens: int
    output_tokens: int
    estimated: int  # runs whose usage is (partly) an estimate
    cost: float | None
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    # of those, the economy lane's share (the run hash's economy fields; a run archived without them: 0)
    economy: tuple[int, int, int, int, int] = (0, 0, 0, 0, 0)  # in, out, nano-USD, cache read, cache write


@dataclass(frozen=True, slots=True)
class SessionRun:
    key_id: str
    client_id: str
    created_at: int
    finished_at: int
    loop: str | None  # the run loop JSON it added to its session's history (a completed run's)


def _num(field: str, cast: str) -> str:
    return f"nullif(record->>'{field}', '')::{cast}"


_ECONOMY = ((F.ECONOMY_IN, "e_in"), (F.ECONOMY_OUT, "e_out"), (F.ECONOMY_COST, "e_cost"),
            (F.ECONOMY_CACHE_READ, "e_cr"), (F.ECONOMY_CACHE_WRITE, "e_cw"))  # fmt: skip

# One run per item index (the newest: an id used again after its run left Redis is a new run that
# answers for it), as a batch's counters count its items; a run without an item index on its own.
# ``batch_id <> ''`` lets PostgreSQL use the partial index runs_batch.
_BATCH = (
    "SELECT status, count(*) AS runs, min(created_at) AS first_created, max(finished_at) AS last_finished, "
    f"coalesce(sum({_num(F.USAGE_IN, 'bigint')}), 0) AS input_tokens, "
    f"coalesce(sum({_num(F.USAGE_OUT, 'bigint')}), 0) AS output_tokens, "
    f"count(*) FILTER (WHERE record->>'{F.USAGE_ESTIMATED}' = '1') AS estimated, "
    f"sum({_num(F.USAGE_COST, 'numeric')}) AS cost, "
    f"coalesce(sum({_num(F.USAGE_CACHE_READ, 'bigint')}), 0) AS cache_read_tokens, "
    f"coalesce(sum({_num(F.USAGE_CACHE_WRITE, 'bigint')}), 0) AS cache_write_tokens, "
    + ", ".join(f"coalesce(sum({_num(f, 'bigint')}), 0) AS {c}" for f, c in _ECONOMY)
    + " FROM ("
    "SELECT DISTINCT ON (item_index, CASE WHEN item_index IS NULL THEN key_id END) "
    "status, created_at, finished_at, record FROM runs "
    "WHERE tenant = $1 AND batch_id = $2 AND batch_id <> '' "
    "ORDER BY item_index, CASE WHEN item_index IS NULL THEN key_id END, created_at DESC) AS r "
    "GROUP BY status"
)


async def batch_rows(store: ArchiveStore, tenant: str, batch_id: str) -> list[BatchRow]:
    """``tenant``'s archived runs of batch ``batch_id`` by status ([] when it has none there)."""
    rows = await store.fetch(_BATCH, tenant, batch_id)
    return [
        BatchRow(
            r["status"],
            int(r["runs"]),
            int(r["first_created"]),
            int(r["last_finished"]),
            int(r["input_tokens"]),
            int(r["output_tokens"]),
            int(r["estimated"]),
            float(r["cost"]) if r["cost"] is not None else None,
            int(r["cache_read_tokens"] or 0),
            int(r["cache_write_tokens"] or 0),
            (int(r["e_in"]), int(r["e_out"]), int(r["e_cost"]), int(r["e_cr"]), int(r["e_cw"])),
        )
        for r in rows
    ]


def _session_sql(tenant: bool) -> str:
    where = (
        "tenant = $1 AND " if tenant else ""
    ) + f"session_id = ${2 if tenant else 1} AND session_id <> ''"
    n = 3 if tenant else 2
    return (
        f"SELECT key_id, client_id, created_at, finished_at, record->>'{F.LOOP}' AS loop, "
        f"(SELECT min(created_at) FROM runs WHERE {where}) AS first FROM runs WHERE {where} "
        f"ORDER BY created_at DESC, key_id DESC LIMIT ${n}"
    )


_SESSION, _SESSION_ANY = _session_sql(True), _session_sql(False)


async def session_runs(
    store: ArchiveStore, tenant: str | None, session_key: str, limit: int
) -> tuple[int, list[SessionRun]]:
    """The session's first run's creation time and its newest ``limit`` archived runs, newest first,
    as the archive keeps them under the session's key (``tsc_…`` for a named tenant: the key its
    runs' ``sessionId`` holds) and ``tenant`` (None: any); (0, []) when it has none."""
    args: list[Any] = [tenant, session_key, limit] if tenant is not None else [session_key, limit]
    rows = await store.fetch(_SESSION if tenant is not None else _SESSION_ANY, *args)
    runs = [
        SessionRun(r["key_id"], r["client_id"], int(r["created_at"]), int(r["finished_at"]), r["loop"])
        for r in rows
    ]
    return (int(rows[0]["first"]) if rows else 0), runs


async def client_ids(store: ArchiveStore, key_ids: Sequence[str], tenant: str | None) -> dict[str, str]:
    """The ids the clients know the archived runs kept under ``key_ids`` by (``tenant``'s, unless
    None; of runs kept under one id, the newest's)."""
    if not key_ids:
        return {}
    rows = await store.fetch(
        "SELECT DISTINCT ON (key_id) key_id, client_id FROM runs WHERE key_id = ANY($1::text[]) "
        "AND ($2::text IS NULL OR tenant = $2) ORDER BY key_id, created_at DESC",
        list(key_ids),
        tenant,
    )
    return {r["key_id"]: r["client_id"] for r in rows}
