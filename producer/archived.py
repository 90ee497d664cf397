"""Runs read from the archive (AGENTMILL_ARCHIVE_URL, shared/archive/) once they have left Redis, or
once their events have: the same RunRecord and RunEvents a read from Redis gives, under the same
tenant isolation (a run is found only under its tenant's key of it, submission.Scope)."""

from __future__ import annotations

from collections.abc import Sequence

import orjson

from agentmill_client.models import EventKind, RunEvent, RunResult, RunStatus
from producer.run_filter import RunFilter
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

    async def listing_reply(
        self, tenant: str, flt: RunFilter, cursor: tuple[str, str] | None, limit: int, seen: set[str]
    ) -> tuple[list[str], dict[str, str], dict[str, str]]:
        """The archive's page of a listing as one more partition's LIST_RUNS reply would be
        (producer.listing.merge_pages: it stopped at its last run when the page is full), leaving
        out the runs ``seen`` in Redis's replies; with the stream key and the client's session id of
        each run it lists."""
        got = await self.store.list_page(
            tenant,
            equal={"status": flt.status, "agent": flt.agent, "session_id": flt.session_id, "batch_id": flt.batch_id},
            meta=flt.metadata, created_after=flt.created_after, created_before=flt.created_before,
            cursor=(int(cursor[0]), cursor[1]) if cursor else None, limit=limit,
        )  # fmt: skip
        reply = ["", ""]
        if len(got) == limit:
            reply = [got[-1][0][2], got[-1][0][0]]
        streams: dict[str, str] = {}
        sessions: dict[str, str] = {}
        for row, stream, client_session in got:
            if row[0] in seen:
                continue
            reply += row
            streams[row[0]] = stream
            if client_session and row[3]:
                sessions[row[3]] = client_session
        return reply, streams, sessions
