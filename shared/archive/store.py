"""The archive in PostgreSQL (asyncpg, the optional extra ``archive``): batches of finished runs
written exactly once, and the reads the API falls back to once a run has left Redis.

Exactly once: a run's row is keyed by the id its Redis keys used and its creation time (an id used
again once its run left Redis names another run: both are kept), and a batch is one transaction of
``INSERT … ON CONFLICT DO NOTHING``; a batch written again (its archiver died before marking it
archived in Redis) inserts nothing, and its events and tool records go in only with a run row this
transaction inserted.

Deleting (runs with their sub-agents, by metadata, the retention's prune) is in deletion.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from shared.archive.deletion import ArchiveDeletion
from shared.archive.schema import migrate
from shared.fields import RunField
from shared.listing_row import ListingRow, select_list
from shared.meta_terms import meta_terms

__all__ = [
    "ArchiveStore",
    "ArchiveUnavailableError",
    "ArchivedRun",
    "EventRow",
    "archived_run",
]

F = RunField
EventRow = tuple[int, str, int, str, int]  # seq, kind, ts, payload (JSON text), epoch


class ArchiveUnavailableError(Exception):
    """PostgreSQL is unreachable (down, restarting, refusing connections): try again shortly."""


def _down_errors() -> tuple[type[BaseException], ...]:
    import asyncpg

    x = asyncpg.exceptions
    return (OSError, TimeoutError, x.InterfaceError, x.PostgresConnectionError, x.OperatorInterventionError)


@dataclass(frozen=True, slots=True)
class ArchivedRun:
    key_id: str
    tenant: str
    client_id: str
    status: str
    created_at: int
    finished_at: int
    session_id: str
    client_session: str
    agent: str
    batch_id: str
    item_index: int | None
    meta: list[str]
    last_seq: int
    stream_key: str
    input: str | None
    result: str | None
    record: dict[str, str]
    events: list[EventRow] = field(default_factory=list)
    tools: list[tuple[str, str]] = field(default_factory=list)


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def archived_run(
    key_id: str,
    stream_key: str,
    run: Mapping[Any, Any],
    entries: Sequence[tuple[Any, Mapping[Any, Any]]],
    tools: Mapping[Any, Any],
    item_index: Any,
) -> ArchivedRun:
    """A run as Redis held it (its hash, its stream's entries, its tools hash, its item index in
    its batch, None when in none) as the archive keeps it."""
    h = {_s(k): _s(v) for k, v in run.items()}
    events: list[EventRow] = []
    for _, fields in entries:
        f = {_s(k): v for k, v in fields.items()}
        events.append(
            (int(f["seq"]), _s(f["kind"]), int(f["ts"]), _s(f["payload"]), int(f.get("epoch") or 0))
        )
    return ArchivedRun(
        key_id=key_id,
        tenant=h.get(F.TENANT, ""),
        client_id=h.get(F.CLIENT_ID) or key_id,
        status=h.get(F.STATUS, ""),
        created_at=int(h.get(F.CREATED_AT) or 0),
        finished_at=int(h.get(F.FINISHED_AT) or 0),
        session_id=h.get(F.SESSION_ID, ""),
        client_session=h.get(F.CLIENT_SESSION, ""),
        agent=h.get(F.AGENT, ""),
        batch_id=h.get(F.BATCH, ""),
        item_index=int(float(_s(item_index))) if item_index is not None else None,
        meta=_meta(h.get(F.INPUT)),
        last_seq=int(h.get(F.LAST_SEQ) or 0),
        stream_key=stream_key,
        input=h.get(F.INPUT),
        result=h.get(F.RESULT) or None,
        record=h,
        events=events,
        tools=[(_s(k), _s(v)) for k, v in tools.items()],
    )


def _meta(raw: str | None) -> list[str]:
    try:
        metadata = orjson.loads(raw).get("metadata") if raw else None
    except (orjson.JSONDecodeError, AttributeError):
        return []
    return meta_terms(metadata) if isinstance(metadata, dict) else []


_RUN_COLS = (
    "key_id", "tenant", "client_id", "status", "created_at", "finished_at", "session_id", "client_session",
    "agent", "batch_id", "item_index", "meta", "last_seq", "stream_key", "input", "result", "record",
)  # fmt: skip
_RUN_TYPES = (
    "text", "text", "text", "text", "bigint", "bigint", "text", "text", "text", "text", "bigint", "text",
    "integer", "text", "text", "text", "jsonb",
)  # fmt: skip
# meta goes as a JSON array (unnest would flatten an array of arrays)
_INSERT_RUNS = (
    f"INSERT INTO runs ({', '.join(_RUN_COLS)}) SELECT "
    + ", ".join("ARRAY(SELECT jsonb_array_elements_text(u.meta::jsonb))" if c == "meta" else f"u.{c}"
                for c in _RUN_COLS)
    + " FROM unnest("
    + ", ".join(f"${i + 1}::{t}[]" for i, t in enumerate(_RUN_TYPES))
    + f") AS u({', '.join(_RUN_COLS)}) ON CONFLICT (key_id, created_at) DO NOTHING RETURNING key_id, created_at"
)  # fmt: skip
_INSERT_EVENTS = (
    "INSERT INTO run_events (key_id, created_at, seq, kind, ts, payload, epoch) SELECT * FROM "
    "unnest($1::text[], $2::bigint[], $3::integer[], $4::text[], $5::bigint[], $6::text[], $7::integer[]) "
    "ON CONFLICT DO NOTHING"
)
_INSERT_TOOLS = (
    "INSERT INTO run_tools (key_id, created_at, tool_call_id, record) SELECT * FROM "
    "unnest($1::text[], $2::bigint[], $3::text[], $4::text[]) ON CONFLICT DO NOTHING"
)
_READ_COLS = (
    "key_id, tenant, client_id, status, created_at, session_id, client_session, agent, last_seq, stream_key, "
    "result, record->>'agentVersion' AS agent_version"
)


class ArchiveStore(ArchiveDeletion):
    """One process's connections to the archive (a small pool, opened and migrated on first use)."""

    def __init__(self, url: str, *, max_size: int = 4) -> None:
        self.url = url
        self.max_size = max_size
        self._pool: Any = None
        self._opening = asyncio.Lock()

    async def pool(self) -> Any:
        """The pool (opened, and the schema migrated, on first use); ArchiveUnavailableError when
        PostgreSQL cannot be reached."""
        try:
            return await self._open()
        except _down_errors() as exc:
            raise ArchiveUnavailableError(str(exc)) from exc

    async def fetch(self, sql: str, *args: Any) -> list[Any]:
        """The rows of one query (shared.archive.groups reads through it too); ArchiveUnavailableError
        when PostgreSQL cannot be reached."""
        pool = await self.pool()
        try:
            return list(await pool.fetch(sql, *args))
        except _down_errors() as exc:
            raise ArchiveUnavailableError(str(exc)) from exc

    async def _open(self) -> Any:
        if self._pool is not None:
            return self._pool
        async with self._opening:
            if self._pool is None:
                import asyncpg  # the optional extra: only a deployment with an archive needs it

                pool = await asyncpg.create_pool(self.url, min_size=0, max_size=self.max_size)
                try:
                    async with pool.acquire() as conn:
                        await migrate(conn)
                except BaseException:
                    await pool.close()
                    raise
                self._pool = pool
        return self._pool

    async def ping(self) -> None:
        """One round trip; ArchiveUnavailableError when PostgreSQL does not answer."""
        await self.fetch("SELECT 1")

    async def aclose(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()

    # ---- writing ----

    async def write(self, runs: Sequence[ArchivedRun]) -> int:
        """The runs, their events and tool records, in one transaction; those already archived are
        left as they are. How many runs were new."""
        if not runs:
            return 0
        cols: list[list[Any]] = [[] for _ in _RUN_COLS]
        for r in runs:
            row = (
                r.key_id, r.tenant, r.client_id, r.status, r.created_at, r.finished_at, r.session_id,
                r.client_session, r.agent, r.batch_id, r.item_index, orjson.dumps(r.meta).decode(), r.last_seq,
                r.stream_key, r.input,
                r.result, orjson.dumps(r.record).decode(),
            )  # fmt: skip
            for c, v in zip(cols, row, strict=True):
                c.append(v)
        pool = await self.pool()
        async with pool.acquire() as conn, conn.transaction():
            new = {(row["key_id"], row["created_at"]) for row in await conn.fetch(_INSERT_RUNS, *cols)}
            ev: list[list[Any]] = [[], [], [], [], [], [], []]
            tl: list[list[Any]] = [[], [], [], []]
            for r in runs:
                if (r.key_id, r.created_at) not in new:
                    continue
                for e in r.events:
                    ev[0].append(r.key_id)
                    ev[1].append(r.created_at)
                    for col, val in zip(ev[2:], e, strict=True):
                        col.append(val)
                for call_id, record in r.tools:
                    tl[0].append(r.key_id)
                    tl[1].append(r.created_at)
                    tl[2].append(call_id)
                    tl[3].append(record)
            if ev[0]:
                await conn.execute(_INSERT_EVENTS, *ev)
            if tl[0]:
                await conn.execute(_INSERT_TOOLS, *tl)
        return len(new)

    # ---- reading ----

    async def run(self, ids: Sequence[str], tenant: str | None) -> dict[str, Any] | None:
        """The first of the runs kept under ``ids`` (and ``tenant``'s, unless None); of several runs
        kept under one id (the id used again after its run left Redis), the newest."""
        rows = await self.fetch(
            f"SELECT DISTINCT ON (key_id) {_READ_COLS} FROM runs WHERE key_id = ANY($1::text[]) "
            "AND ($2::text IS NULL OR tenant = $2) ORDER BY key_id, created_at DESC",
            list(ids),
            tenant,
        )
        by_id = {r["key_id"]: dict(r) for r in rows}
        return next((by_id[i] for i in ids if i in by_id), None)

    async def list_page(
        self,
        tenant: str,
        *,
        equal: Mapping[str, str | None],
        meta: Sequence[str],
        created_after: int | None,
        created_before: int | None,
        cursor: tuple[int, str] | None,
        limit: int,
    ) -> list[tuple[ListingRow, str, str]]:
        """A page of ``tenant``'s archived runs, newest first by (createdAt, id bytewise, as Redis
        orders a listing index), after ``cursor``: each as its listing row (shared.listing_row: the
        fields its run hash held, read from ``record``), with its stream key and its client's
        session id. ``equal``: status, agent, session_id, batch_id, parent_run_id (the id the
        parent's keys used) values the runs must have (None: any)."""
        cs, cid = cursor if cursor is not None else (None, "")
        rows = await self.fetch(
            f"SELECT {select_list()}, client_session AS _client_session, stream_key AS _stream_key "
            "FROM runs WHERE tenant = $1 "
            "AND ($2::text IS NULL OR status = $2) AND ($3::text IS NULL OR agent = $3) "
            "AND ($4::text IS NULL OR session_id = $4) AND ($5::text IS NULL OR batch_id = $5) "
            "AND meta @> $6::text[] AND ($7::bigint IS NULL OR created_at > $7) "
            "AND ($8::bigint IS NULL OR created_at < $8) "
            "AND ($9::bigint IS NULL OR created_at < $9 OR (created_at = $9 AND key_id < $10)) "
            f"AND ($12::text IS NULL OR record->>'{F.PARENT_RUN}' = $12) "
            "ORDER BY created_at DESC, key_id DESC LIMIT $11",
            tenant, equal.get("status"), equal.get("agent"), equal.get("session_id"), equal.get("batch_id"),
            list(meta), created_after, created_before, cs, cid, limit, equal.get("parent_run_id"),
        )  # fmt: skip
        width = ListingRow.width()
        return [
            (ListingRow.parse([r[i] for i in range(width)]), r["_stream_key"], r["_client_session"])
            for r in rows
        ]

    async def events(self, key_id: str, after: int, limit: int) -> list[tuple[int, str, int, str]]:
        """Events of a run (the newest kept under ``key_id``) with seq > after, oldest first: seq, kind,
        ts, payload."""
        rows = await self.fetch(
            "SELECT seq, kind, ts, payload FROM run_events WHERE key_id = $1 "
            "AND created_at = (SELECT max(created_at) FROM runs WHERE key_id = $1) "
            "AND seq > $2 ORDER BY seq LIMIT $3",
            key_id,
            after,
            limit,
        )
        return [(r["seq"], r["kind"], r["ts"], r["payload"]) for r in rows]

    async def batch_page(
        self,
        tenant: str,
        batch_id: str,
        after: tuple[int, str] | None,
        limit: int,
        statuses: Sequence[str] = (),
    ) -> list[tuple[int, str, str, str]]:
        """A batch's archived runs after ``after`` (item index, client id), in that order, one per item
        index (the newest: a retry that took a run's place, an id used again after its run left Redis),
        as the batch's counters count them (shared.archive.groups): item index, client id, status,
        result JSON ('' = none). ``statuses`` filter the newest runs (an item whose newest run has
        another status has no line)."""
        start_index, start_id = after if after is not None else (-1, "")
        rows = await self.fetch(  # in runs_batch's order, each run's newer ones looked up in it too
            "SELECT item_index, client_id, status, coalesce(result, '') AS result FROM runs r "
            "WHERE tenant = $1 AND batch_id = $2 AND (item_index, client_id) > ($3, $4) "
            "AND (cardinality($5::text[]) = 0 OR status = ANY($5::text[])) "
            "AND NOT EXISTS (SELECT 1 FROM runs n WHERE n.tenant = $1 AND n.batch_id = $2 "
            "AND n.item_index = r.item_index AND n.created_at > r.created_at) "
            "ORDER BY item_index, client_id LIMIT $6",
            tenant,
            batch_id,
            start_index,
            start_id,
            list(statuses),
            limit,
        )
        return [(int(r["item_index"] or 0), r["client_id"], r["status"], r["result"]) for r in rows]
