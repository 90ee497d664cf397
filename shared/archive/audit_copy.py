"""The tenants' audit logs (producer/audit.py), copied from their Redis streams to the archive's
``audit_log`` table for good, by the archiver after each pass (shared/archive/archiver.py), and read
back from there for what Redis has trimmed. At least once from Redis, exactly once in the table:
an entry is keyed by its tenant and stream id, and each tenant's copy mark (the last id copied)
moves only after the write. Several archivers may copy at once; they write the same rows."""

from __future__ import annotations

from typing import Any

from shared.fields import AuditField as AF

__all__ = ["BATCH", "AuditCopier", "audit_page", "split_id"]

BATCH = 1000  # entries a tenant copies per pass at most
_INSERT = (
    "INSERT INTO audit_log (tenant, at, seq, action, target, actor, actor_name, request_id, detail) "
    "SELECT * FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::text[], $5::text[], $6::text[], "
    "$7::text[], $8::text[], $9::text[]) ON CONFLICT DO NOTHING"
)
_COLUMNS = "at, seq, action, target, actor, actor_name, request_id, detail"


def _t(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def split_id(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


class AuditCopier:
    """``parts``: the pool's partitions; ``store``: shared.archive.store.ArchiveStore."""

    def __init__(self, parts: Any, store: Any) -> None:
        self.parts, self.store = parts, store
        self.copied = 0  # entries this copier wrote (tests)

    async def copy_once(self) -> int:
        """One pass over every tenant with an audit log: its entries since its mark, up to BATCH. How many."""
        first = self.parts.parts[0]

        async def tenants(c: Any) -> list[Any]:
            return list(await c.smembers(first.audit_tenants))

        moved = 0
        for raw in await self.parts.call(first, tenants):
            moved += await self._copy(_t(raw))
        self.copied += moved
        return moved

    async def _copy(self, tenant: str) -> int:
        home = self.parts.home(tenant)

        async def read(c: Any) -> tuple[Any, list[Any]]:
            mark = await c.get(home.audit_copied(tenant))
            start = f"({_t(mark)}" if mark else "-"
            return mark, await c.xrange(home.audit(tenant), start, "+", count=BATCH)

        _, entries = await self.parts.call(home, read)
        if not entries:
            return 0
        cols: list[list[Any]] = [[] for _ in range(9)]
        for entry_id, raw in entries:
            h = {_t(k): _t(v) for k, v in raw.items()}
            at, seq = split_id(_t(entry_id))
            row = (tenant, at, seq, h.get(AF.ACTION, ""), h.get(AF.TARGET, ""), h.get(AF.ACTOR, ""),
                   h.get(AF.ACTOR_NAME, ""), h.get(AF.REQUEST_ID, ""), h.get(AF.DETAIL, ""))  # fmt: skip
            for c, v in zip(cols, row, strict=True):
                c.append(v)
        pool = await self.store.pool()
        await pool.execute(_INSERT, *cols)
        last = _t(entries[-1][0])

        async def mark(c: Any) -> None:
            await c.set(home.audit_copied(tenant), last)

        await self.parts.call(home, mark)
        return len(entries)


async def audit_page(
    store: Any,
    tenant: str,
    after: tuple[int, int] | None,
    to_ms: int | None,
    limit: int,
    action: str | None = None,
    target: str | None = None,
) -> list[dict[str, Any]]:
    """Up to ``limit`` archived entries of ``tenant`` after the place ``after`` (None: from the
    start), not after ``to_ms``, of ``action`` and ``target`` when given, oldest first, in
    GET /v1/audit's shape."""
    at, seq = after if after is not None else (-1, -1)
    rows = await store.fetch(
        f"SELECT {_COLUMNS} FROM audit_log WHERE tenant = $1 AND (at, seq) > ($2, $3) "
        "AND ($4::bigint IS NULL OR at <= $4) AND ($6::text IS NULL OR action = $6) "
        "AND ($7::text IS NULL OR target = $7) ORDER BY at, seq LIMIT $5",
        tenant, at, seq, to_ms, limit, action, target,
    )  # fmt: skip
    return [
        {"id": f"{r['at']}-{r['seq']}", "at": r["at"], "action": r["action"], "target": r["target"],
         "actor": r["actor"], "actorName": r["actor_name"], "tenant": tenant, "requestId": r["request_id"],
         "detail": r["detail"]}
        for r in rows
    ]  # fmt: skip
