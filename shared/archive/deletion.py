"""Deleting from the archive: a run kept under its ids with its sub-agents' runs (DELETE
/v1/runs/{id}, sessions and deletions by metadata: producer/deletion.py), the runs a deletion by
metadata or of a session names, and the retention's prune. ``ArchiveStore`` (store.py) has these."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

__all__ = ["ArchiveBusyError", "ArchiveDeletion"]


class ArchiveBusyError(Exception):
    """Rows to delete stayed locked by another transaction (an archiver's write) past the wait allowed."""


class _Pooled(Protocol):
    async def pool(self) -> Any: ...

    async def fetch(self, sql: str, *args: Any) -> list[Any]: ...


_DELETE_TREES = (
    "WITH RECURSIVE tree(key_id) AS ("
    " SELECT key_id FROM runs WHERE key_id = ANY($1::text[]) AND ($2::text IS NULL OR tenant = $2)"
    " UNION SELECT r.key_id FROM runs r JOIN tree t ON r.record->>'parentRunId' = t.key_id)"
    " DELETE FROM runs WHERE key_id IN (SELECT key_id FROM tree)"
)


class ArchiveDeletion:
    """The archive store's deletions, through its pool (``pool``, ``fetch``)."""

    async def prune(self: _Pooled, before_ms: int, limit: int = 1000) -> int:
        """Delete up to ``limit`` runs that finished before ``before_ms`` (their events and tool
        records with them): the retention's delete job. How many went."""
        pool = await self.pool()
        status = await pool.execute(
            "DELETE FROM runs WHERE (key_id, created_at) IN "
            "(SELECT key_id, created_at FROM runs WHERE finished_at < $1 ORDER BY finished_at LIMIT $2)",
            before_ms,
            limit,
        )
        return int(str(status).rsplit(" ", 1)[-1] or 0)

    async def delete_runs(
        self: _Pooled,
        key_ids: Sequence[str],
        tenant: str | None = None,
        *,
        lock_timeout_ms: int | None = None,
    ) -> int:
        """Delete the runs kept under ``key_ids`` (``tenant``'s, unless None), every version of each, and
        their sub-agents' runs, with their events and tool records. How many runs went. With
        ``lock_timeout_ms``: a row another transaction holds is waited for that long at most, then
        ArchiveBusyError (nothing deleted)."""
        if not key_ids:
            return 0
        pool = await self.pool()
        if lock_timeout_ms is None:
            status = await pool.execute(_DELETE_TREES, list(key_ids), tenant)
            return int(str(status).rsplit(" ", 1)[-1] or 0)
        import asyncpg

        try:
            async with pool.acquire() as conn, conn.transaction():
                await conn.execute(f"SET LOCAL lock_timeout = {max(1, int(lock_timeout_ms))}")
                status = await conn.execute(_DELETE_TREES, list(key_ids), tenant)
        except asyncpg.exceptions.LockNotAvailableError as exc:
            raise ArchiveBusyError(f"{len(key_ids)} runs' rows locked past {lock_timeout_ms} ms") from exc
        return int(str(status).rsplit(" ", 1)[-1] or 0)

    async def key_ids_where(
        self: _Pooled, tenant: str, *, terms: Sequence[str] = (), session_id: str = "", limit: int = 1000
    ) -> list[str]:
        """Up to ``limit`` ids of ``tenant``'s archived runs whose metadata has every term of ``terms``
        (shared.meta_terms), or of its session ``session_id`` (the id its keys use)."""
        rows = await self.fetch(
            "SELECT DISTINCT key_id FROM runs WHERE tenant = $1 AND meta @> $2::text[] "
            "AND ($3 = '' OR session_id = $3) LIMIT $4",
            tenant, list(terms), session_id, limit,
        )  # fmt: skip
        return [r["key_id"] for r in rows]

    async def count_where(self: _Pooled, tenant: str, terms: Sequence[str]) -> int:
        """How many of ``tenant``'s archived runs have every term of ``terms`` in their metadata."""
        rows = await self.fetch(
            "SELECT count(DISTINCT key_id) AS n FROM runs WHERE tenant = $1 AND meta @> $2::text[]",
            tenant, list(terms),
        )  # fmt: skip
        return int(rows[0]["n"]) if rows else 0
