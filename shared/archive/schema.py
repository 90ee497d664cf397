"""The archive's schema, created and migrated by agentmill itself: numbered migrations, each applied
once in its own transaction and recorded in ``agentmill_migrations``, under an advisory lock so
processes starting together do not race. Add a migration at the end; never edit one released.

Texts the API answers with (an event's payload, a result, an input) are kept as the exact text
Redis held, so a read from the archive answers byte for byte what a read from Redis did.
"""

from __future__ import annotations

from typing import Any

__all__ = ["LOCK_ID", "MIGRATIONS", "migrate"]

LOCK_ID = 0x616D_6172  # pg_advisory_xact_lock key of the migrations ("amar")

MIGRATIONS: tuple[tuple[int, str], ...] = (
    (
        1,
        """
        CREATE TABLE runs (
            key_id        text COLLATE "C" NOT NULL,  -- the id its Redis keys used (tsc_… for a
                                                      -- named tenant); bytewise, as Redis orders ids
            tenant        text NOT NULL,
            client_id     text NOT NULL,      -- the id its tenant knows it by
            status        text NOT NULL,
            created_at    bigint NOT NULL,    -- ms
            finished_at   bigint NOT NULL,    -- ms
            session_id    text NOT NULL DEFAULT '',
            client_session text NOT NULL DEFAULT '',
            agent         text NOT NULL DEFAULT '',
            batch_id      text NOT NULL DEFAULT '',
            item_index    bigint,             -- its index in its batch
            meta          text[] NOT NULL DEFAULT '{}',  -- its metadata's listing terms (shared.meta_terms)
            last_seq      integer NOT NULL,
            stream_key    text NOT NULL,      -- the Redis stream its events were in
            input         text,               -- the RunInput JSON
            result        text,               -- the RunResult JSON
            record        jsonb NOT NULL,     -- the whole run hash as it ended
            archived_at   timestamptz NOT NULL DEFAULT now(),
            -- an id used again once its run left Redis is another run: both are kept, the newer
            -- one answers for the id
            PRIMARY KEY (key_id, created_at)
        );
        CREATE INDEX runs_tenant_created ON runs (tenant, created_at DESC, key_id DESC);
        CREATE INDEX runs_meta ON runs USING gin (meta);
        CREATE INDEX runs_batch ON runs (tenant, batch_id, item_index, client_id) WHERE batch_id <> '';
        CREATE INDEX runs_finished ON runs (finished_at);
        CREATE TABLE run_events (
            key_id  text COLLATE "C" NOT NULL,
            created_at bigint NOT NULL,
            seq     integer NOT NULL,
            kind    text NOT NULL,
            ts      bigint NOT NULL,
            payload text NOT NULL,
            epoch   integer NOT NULL,
            PRIMARY KEY (key_id, created_at, seq),
            FOREIGN KEY (key_id, created_at) REFERENCES runs ON DELETE CASCADE
        );
        CREATE TABLE run_tools (
            key_id       text COLLATE "C" NOT NULL,
            created_at   bigint NOT NULL,
            tool_call_id text NOT NULL,
            record       text NOT NULL,      -- shared.tool_records.ToolRecord JSON
            PRIMARY KEY (key_id, created_at, tool_call_id),
            FOREIGN KEY (key_id, created_at) REFERENCES runs ON DELETE CASCADE
        );
        """,
    ),
    (
        2,
        # a session's runs, newest first (GET /v1/sessions/{id} once Redis forgot the session); a
        # batch's counters read runs_batch. Built under the migration's lock: writes to runs wait.
        """
        CREATE INDEX runs_session ON runs (tenant, session_id, created_at DESC, key_id DESC)
            WHERE session_id <> '';
        """,
    ),
    (
        3,
        # the tenants' audit logs, for good (shared/archive/audit_copy.py copies them from Redis)
        """
        CREATE TABLE audit_log (
            tenant      text NOT NULL,
            at          bigint NOT NULL,   -- ms: the Redis stream entry id's time
            seq         bigint NOT NULL,   -- and its sequence: (at, seq) is the entry's place
            action      text NOT NULL,
            target      text NOT NULL,
            actor       text NOT NULL,
            actor_name  text NOT NULL,
            request_id  text NOT NULL,
            detail      text NOT NULL,
            PRIMARY KEY (tenant, at, seq)
        );
        """,
    ),
    (
        4,
        # a run's children (sub-agents), which its deletion deletes with it
        """
        CREATE INDEX runs_parent ON runs ((record->>'parentRunId'));
        """,
    ),
)


async def migrate(conn: Any) -> int:
    """Apply the migrations ``conn``'s database lacks; the schema version it has then. A database
    that has them all is read without the migrations' lock: another process that holds it (one
    paused mid-start, say) does not hold up this one's first archive read or deletion."""
    import asyncpg

    latest = max(v for v, _ in MIGRATIONS)
    try:
        have = {r["version"] for r in await conn.fetch("SELECT version FROM agentmill_migrations")}
    except asyncpg.exceptions.UndefinedTableError:
        have = set()
    if all(v in have for v, _ in MIGRATIONS):
        return latest
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", LOCK_ID)
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS agentmill_migrations "
            "(version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        have = {r["version"] for r in await conn.fetch("SELECT version FROM agentmill_migrations")}
        for version, sql in MIGRATIONS:
            if version in have:
                continue
            await conn.execute(sql)
            await conn.execute("INSERT INTO agentmill_migrations (version) VALUES ($1)", version)
    return latest
