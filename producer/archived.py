"""Runs read from the archive (AGENTMILL_ARCHIVE_URL, shared/archive/) once they have left Redis, or
once their events have: the same RunRecord and RunEvents a read from Redis gives, under the same
tenant isolation (a run is found only under its tenant's key of it, submission.Scope); and a
batch's counters once Redis no longer has the batch (the hash producer.listing.batch_view shows),
a session's runs once it no longer has the session's (producer.sessions)."""

from __future__ import annotations

from collections.abc import Sequence

from agentmill_client.models import EventKind, RunEvent, RunResult, RunStatus
from agentmill_client.statuses import TERMINAL
from producer.run_filter import RunFilter
from producer.run_record import RunRecord
from shared import payload_crypto
from shared.archive import groups
from shared.archive.store import ArchiveStore
from shared.fields import BatchField

__all__ = ["ArchiveReads"]


# BatchRow.economy's counts, in its order
_ECONOMY = (BatchField.ECONOMY_INPUT_TOKENS, BatchField.ECONOMY_OUTPUT_TOKENS, BatchField.ECONOMY_COST,
            BatchField.ECONOMY_CACHE_READ_TOKENS, BatchField.ECONOMY_CACHE_WRITE_TOKENS)  # fmt: skip


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
            result=RunResult.model_validate(payload_crypto.loads(row["result"])) if row["result"] else None,
            stream_key=row["stream_key"],
            client_session=row["client_session"],
            agent=row["agent"],
            agent_version=int(v) if (v := row["agent_version"]) else None,
            archived=True,
        )

    async def batch(self, tenant: str, batch_id: str) -> dict[str, str] | None:
        """The batch's hash as Redis would hold it had it counted the batch's archived runs (one per
        item index): total, done and a counter per status, created at its first run's creation,
        finished at its last run's ending, its usage totals (and their economy lane's share); None when the archive has none of its
        runs. Only ended runs are archived: a run of the batch still in Redis is not counted."""
        rows = await groups.batch_rows(self.store, tenant, batch_id)
        if not rows:
            return None
        total = sum(r.runs for r in rows)
        costs = [r.cost for r in rows if r.cost is not None]
        h = {
            BatchField.BATCH_ID: batch_id,
            BatchField.TENANT: tenant,
            BatchField.TOTAL: str(total),
            BatchField.DONE: str(sum(r.runs for r in rows if r.status in TERMINAL)),
            BatchField.CREATED_AT: str(min(r.first_created for r in rows)),
            BatchField.FINISHED_AT: str(max(r.last_finished for r in rows)),
            BatchField.INPUT_TOKENS: str(sum(r.input_tokens for r in rows)),
            BatchField.OUTPUT_TOKENS: str(sum(r.output_tokens for r in rows)),
            BatchField.ESTIMATED_RUNS: str(sum(r.estimated for r in rows)),
            BatchField.CACHE_READ_TOKENS: str(sum(r.cache_read_tokens for r in rows)),
            BatchField.CACHE_WRITE_TOKENS: str(sum(r.cache_write_tokens for r in rows)),
            **{r.status: str(r.runs) for r in rows},
            **{f: str(sum(r.economy[i] for r in rows)) for i, f in enumerate(_ECONOMY)},
        }
        if costs:
            h[BatchField.COST_USD] = repr(sum(costs))
        return {str(k): v for k, v in h.items()}

    async def session(
        self, tenant: str | None, session_key: str, limit: int
    ) -> tuple[int, list[groups.SessionRun]]:
        """The session's first creation time and newest ``limit`` archived runs (shared.archive.groups)."""
        return await groups.session_runs(self.store, tenant, session_key, limit)

    async def client_ids(self, key_ids: Sequence[str], tenant: str | None) -> dict[str, str]:
        """The ids the clients know the archived runs ``key_ids`` by."""
        return await groups.client_ids(self.store, key_ids, tenant)

    async def events(self, key_id: str, *, after: int, limit: int, label: str) -> list[RunEvent]:
        """Events with seq > after, oldest first, as decode_entry reads them from the stream."""
        return [
            RunEvent(
                run_id=label, seq=seq, kind=EventKind(kind), payload=payload_crypto.loads(payload), ts=ts
            )
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
            equal={"status": flt.status, "agent": flt.agent, "session_id": flt.session_id, "batch_id": flt.batch_id,
                   "parent_run_id": flt.parent_run_id},
            meta=flt.metadata, created_after=flt.created_after, created_before=flt.created_before,
            cursor=(int(cursor[0]), cursor[1]) if cursor else None, limit=limit,
        )  # fmt: skip
        reply = ["", ""]
        if len(got) == limit:
            reply = [got[-1][0].created_at, got[-1][0].run_id]
        streams: dict[str, str] = {}
        sessions: dict[str, str] = {}
        for row, stream, client_session in got:
            if row.run_id in seen:
                continue
            reply += row.values()
            streams[row.run_id] = stream
            if client_session and row.session_id:
                sessions[row.session_id] = client_session
        return reply, streams, sessions
