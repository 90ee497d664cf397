"""Runs read from the archive (AGENTMILL_ARCHIVE_URL, shared/archive/) once they have left Redis, or
once their events have: the same RunRecord and RunEvents a read from Redis gives, under the same
tenant isolation (a run is found only under its tenant's key of it, submission.Scope)."""

from __future__ import annotations

from collections.abc import Sequence

import orjson

from agentmill_client.models import EventKind, RunEvent, RunResult, RunStatus
from producer.run_record import RunRecord
from shared.archive.store import ArchiveStore

__all__ = ["ArchiveReads"]


class ArchiveReads:
    def __init__(self, store: ArchiveStore) -> None:
        self.store = store

    async def aclose(self) -> None:
        await self.store.aclose()

    async def record(self, ids: Sequence[str], tenant: str | None) -> RunRecord | None:
        """The first of the runs kept under ``ids`` that the archive holds (``tenant``'s, unless None)."""
        row = await self.store.run(ids, tenant)
        if row is None:
            return None
        return RunRecord(
            run_id=row["key_id"],
            status=RunStatus(row["status"]),
            tenant=row["tenant"],
            session_id=row["session_id"] or None,
            created_at_ms=int(row["created_at"]),
            last_seq=int(row["last_seq"]),
            result=RunResult.model_validate_json(row["result"]) if row["result"] else None,
            stream_key=row["stream_key"],
            client_session=row["client_session"],
            archived=True,
        )

    async def events(self, key_id: str, *, after: int, limit: int, label: str) -> list[RunEvent]:
        """Events with seq > after, oldest first, as decode_entry reads them from the stream."""
        return [
            RunEvent(run_id=label, seq=seq, kind=EventKind(kind), payload=orjson.loads(payload), ts=ts)
            for seq, kind, ts, payload in await self.store.events(key_id, after, limit)
        ]
