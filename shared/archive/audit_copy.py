"""The tenants' audit logs (producer/audit.py), copied from their Redis streams to the archive's
``audit_log`` table for good, by the archiver after each pass (shared/archive/archiver.py), and read
back from there for what Redis has trimmed. At least once from Redis, exactly once in the table:
an entry is keyed by its tenant and stream id, and each tenant's copy mark (the last id copied)
moves only after the write. Several archivers may copy at once; they write the same rows."""

from __future__ import annotations

import time
from typing import Any

from shared import keys
from shared.fields import AuditField as AF

__all__ = ["BATCH", "EVERY_S", "AuditCopier", "audit_page", "split_id"]

BATCH = 1000  # entries a tenant copies per pass at most
EVERY_S = 1.0  # the archiver's passes copy at most this often
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
    """``parts``: the pool's partitions; ``store``: shared.archive.store.ArchiveStore. A pass costs
    three round trips per node (the marks, the entries, the new marks) and one INSERT, whatever the
    number of tenants; the archiver makes one at most every ``EVERY_S``."""

    def __init__(self, parts: Any, store: Any) -> None:
        self.parts, self.store = parts, store
        self.copied = 0  # entries this copier wrote (tests)
        self._last = float("-inf")

    async def maybe_copy(self) -> int:
        """``copy_once`` unless one ran less than EVERY_S ago."""
        if time.monotonic() - self._last < EVERY_S:
            return 0
        self._last = time.monotonic()
        return await self.copy_once()

    async def copy_once(self) -> int:
        """One pass over every tenant with an audit log: its entries since its mark, up to BATCH. How many."""
        first = self.parts.parts[0]

        async def members(c: Any) -> list[Any]:
            return list(await c.smembers(first.audit_tenants))

        tenants = sorted(_t(t) for t in await self.parts.call(first, members))
        if not tenants:
            return 0
        homes = [self.parts.home(t) for t in tenants]

        def get_mark(h: keys.Partition, t: str) -> Any:
            return lambda pipe: pipe.get(h.audit_copied(t))

        marks = await self.parts.pipelined([(h, get_mark(h, t)) for h, t in zip(homes, tenants, strict=True)])

        def read(h: keys.Partition, t: str, mark: Any) -> Any:
            start = f"({_t(mark)}" if mark else "-"
            return lambda pipe: pipe.xrange(h.audit(t), start, "+", count=BATCH)

        reads = await self.parts.pipelined(
            [(h, read(h, t, m[0] if m else None)) for h, t, m in zip(homes, tenants, marks, strict=True)]
        )
        cols: list[list[Any]] = [[] for _ in range(9)]
        last: list[tuple[keys.Partition, str, str]] = []
        for h, tenant, got in zip(homes, tenants, reads, strict=True):
            entries = got[0] if got else []
            for entry_id, raw in entries:
                f = {_t(k): _t(v) for k, v in raw.items()}
                at, seq = split_id(_t(entry_id))
                row = (tenant, at, seq, f.get(AF.ACTION, ""), f.get(AF.TARGET, ""), f.get(AF.ACTOR, ""),
                       f.get(AF.ACTOR_NAME, ""), f.get(AF.REQUEST_ID, ""), f.get(AF.DETAIL, ""))  # fmt: skip
                for c, v in zip(cols, row, strict=True):
                    c.append(v)
            if entries:
                last.append((h, tenant, _t(entries[-1][0])))
        if not last:
            return 0
        pool = await self.store.pool()
        await pool.execute(_INSERT, *cols)

        def set_mark(h: keys.Partition, t: str, entry_id: str) -> Any:
            return lambda pipe: pipe.set(h.audit_copied(t), entry_id)

        await self.parts.pipelined([(h, set_mark(h, t, i)) for h, t, i in last])
        self.copied += len(cols[0])
        return len(cols[0])


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
