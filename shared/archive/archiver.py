"""The archiver: moves finished runs from Redis into the archive, off the hot path.

Every ending script (commit.lua, prelude.lua's finalize) puts the run in its partition's archive
index (keys.Partition.archive) when the archive is on. An archiver (one task per worker, or its own
process: ``agentmill archiver``) loops: it claims a batch from every partition for a lease
(archive_claim.lua: one round trip per node), reads each run's hash, stream and tool records (one
pipelined round trip per node), writes them all in one PostgreSQL transaction
(ArchiveStore.write, exactly once), then marks them archived (archive_done.lua): out of the index,
the stream and tool records dropped, the hash expiring after AGENTMILL_LIVE_RETENTION_S. A run deleted
while it was being archived (its tombstone is there when it is marked) has the rows just written
deleted again: a deletion deletes the rows written before its tombstone, the archiver those after.

An archiver that dies mid-batch leaves its claims to expire; the next one writes the batch again,
which inserts nothing twice. While PostgreSQL is down nothing is marked: the indexes grow (the
backlog gauge, alerted on), Redis keeps every unarchived run, and the workers' runs do not wait on
any of it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

from shared import keys
from shared.archive.audit_copy import AuditCopier
from shared.archive.store import ArchivedRun, ArchiveStore, archived_run
from shared.calls.claims import ArchiveClaim
from shared.calls.erasure import ArchiveDone
from shared.fields import RunField
from shared.partitions import Partitions
from shared.replies import text
from shared.scripts import Scripts
from shared.settings import Settings

__all__ = ["Archiver"]

log = logging.getLogger("agentmill.archive")
PRUNE_EVERY_S = 60.0


class Archiver:
    """``on_backlog(n)``: the runs waiting in every archive index, after each pass; ``on_archived(n)``:
    runs newly written; ``after_write()``: called between a batch's write and its marking."""

    def __init__(
        self,
        parts: Partitions[Any],
        scripts: Scripts,
        settings: Settings,
        store: ArchiveStore,
        *,
        on_backlog: Callable[[int], None] | None = None,
        on_archived: Callable[[int], None] | None = None,
        after_write: Callable[[], None] | None = None,
    ) -> None:
        self.parts, self.scripts, self.settings, self.store = parts, scripts, settings, store
        self.on_backlog = on_backlog
        self.on_archived = on_archived
        self.after_write = after_write  # chaos tests: a failpoint between the write and the marking
        n = len(parts.parts)
        self.per_partition = max(1, -(-settings.archive_batch // n))
        self.archived = 0  # runs this archiver wrote (new rows)
        self.audit = AuditCopier(parts, store)  # the tenants' audit logs, copied after each pass
        self._pruned_at = 0.0

    async def run_forever(self) -> None:
        """Pass after pass; a failure (PostgreSQL or Redis down) backs off, up to 5 s, and retries."""
        failures = 0
        poll = self.settings.archive_poll_ms / 1000
        while True:
            try:
                if failures:  # PostgreSQL back? (no runs claimed and read from Redis until it is)
                    await self.store.ping()
                moved = await self.run_once()
                await self._maybe_prune()
                failures = 0
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                failures += 1
                log.warning("archive: pass failed (%d in a row): %s", failures, exc)
                if self.on_backlog is not None:  # the gauge goes on counting through an outage
                    with contextlib.suppress(Exception):
                        self.on_backlog(await self.backlog())
                await asyncio.sleep(min(5.0, poll * 2**failures))
                continue
            if not moved:
                await asyncio.sleep(poll)

    async def run_once(self) -> int:
        """One pass over every partition: claim, read, write, mark. Runs moved."""
        claimed = await self._claim()
        if claimed:
            runs = await self._read(claimed)
            try:
                new = await self.store.write(runs)
            except Exception:
                await self._release(claimed)
                raise
            self.archived += new
            if self.on_archived is not None and new:
                self.on_archived(new)
            if self.after_write is not None:
                self.after_write()
            terms = {r.key_id: r.meta for r in runs}
            await self._done(claimed, terms)  # the runs written, and those with nothing left to write
        await self.audit.maybe_copy()
        if self.on_backlog is not None:
            self.on_backlog(await self.backlog())
        return sum(len(ids) for ids in claimed.values())

    async def backlog(self) -> int:
        """Finished runs waiting for the archive, on every partition."""

        def op(pipe: Any, p: keys.Partition) -> None:
            pipe.zcard(p.archive)

        return sum(int(r[0]) for r in await self.parts.each(op))

    async def _claim(self) -> dict[keys.Partition, list[str]]:
        out = self.parts.sending()
        for p in self.parts.parts:
            call = ArchiveClaim(self.per_partition, self.settings.archive_lease_ms)
            out.add_script(
                p, self.scripts.archive_claim, *self.scripts.framing.frame(p, call.keys(p), call.argv())
            )
        replies = await out.replies()
        claimed: dict[keys.Partition, list[str]] = {}
        for p, reply in zip(self.parts.parts, replies, strict=True):
            if isinstance(reply, BaseException):
                raise reply
            ids = [text(reply[k]) for k in range(0, len(reply), 2)]
            if ids:
                claimed[p] = ids
        return claimed

    async def _read(self, claimed: dict[keys.Partition, list[str]]) -> list[ArchivedRun]:
        """The claimed runs as the archive keeps them (but those whose hash is gone: expired before
        they could be archived, nothing left to write; logged)."""
        where = [(p, rid) for p, ids in claimed.items() for rid in ids]

        def read(p: keys.Partition, rid: str) -> Callable[[Any], None]:
            def op(pipe: Any) -> None:
                pipe.hgetall(p.run(rid))
                pipe.xrange(p.events(rid))
                pipe.hgetall(p.tools(rid))
                pipe.get(p.transcript(rid))  # when checkpoints leave it out: kept with the record

            return op

        replies = await self.parts.pipelined([(p, read(p, rid)) for p, rid in where])
        found = [(p, rid, r) for (p, rid), r in zip(where, replies, strict=True) if r[0]]
        if len(found) < len(where):
            log.error("archive: %d finished runs expired from Redis before they were archived",
                      len(where) - len(found))  # fmt: skip

        def field(h: dict[Any, Any], f: str) -> str:
            v = h.get(f.encode(), h.get(f))
            return text(v)

        batched = [(i, p, r[0]) for i, (p, _, r) in enumerate(found) if field(r[0], RunField.BATCH)]
        items: dict[int, Any] = {}
        if batched:
            zs = await self.parts.pipelined(
                [(p, _zscore(p, field(h, RunField.TENANT), field(h, RunField.BATCH), found[i][1]))
                 for i, p, h in batched]
            )  # fmt: skip
            items = {i: z[0] for (i, _, _), z in zip(batched, zs, strict=True)}
        runs = [
            archived_run(rid, p.events(rid), _with_transcript(r[0], r[3]), r[1], r[2], items.get(i))
            for i, (p, rid, r) in enumerate(found)
        ]
        return runs

    async def _release(self, claimed: dict[keys.Partition, list[str]]) -> None:
        """Claims whose write failed: due again at once (not a lease later), if Redis answers."""

        with contextlib.suppress(Exception):
            await self.parts.pipelined([(p, _due_now(p, ids)) for p, ids in claimed.items()])

    async def _done(self, done: dict[keys.Partition, list[str]], terms: dict[str, list[str]]) -> None:
        """archive_done.lua on each partition: with each run, its metadata's listing terms."""
        live = self.settings.live_retention_s
        out = self.parts.sending()
        for p, ids in done.items():
            runs: list[str | int] = []
            for rid in ids:
                runs += [rid, len(terms.get(rid, ())), *terms.get(rid, ())]
            call = ArchiveDone(live, tuple(runs))
            out.add_script(
                p, self.scripts.archive_done, *self.scripts.framing.frame(p, call.keys(p), call.argv())
            )
        late: list[str] = []
        for r in await out.replies():
            if isinstance(r, BaseException):
                raise r
            late += [text(x) for x in r[1:]]
        if late:  # deleted while this batch was written: its rows go again (the deletion's came first)
            await self.store.delete_runs(late)
            log.info("archive: %d runs deleted while being archived: their rows deleted", len(late))

    async def _maybe_prune(self) -> None:
        days = self.settings.archive_retention_days
        if not days or time.monotonic() - self._pruned_at < PRUNE_EVERY_S:
            return
        self._pruned_at = time.monotonic()
        gone = await self.store.prune(int(time.time() * 1000) - days * 86_400_000)
        if gone:
            log.info("archive: %d runs past the archive retention deleted", gone)


def _due_now(p: keys.Partition, ids: list[str]) -> Callable[[Any], None]:
    return lambda pipe: pipe.zadd(p.archive, dict.fromkeys(ids, 0), xx=True)


def _zscore(p: keys.Partition, tenant: str, batch: str, rid: str) -> Callable[[Any], None]:
    """The run's item index in its batch (index_keys.INDEX_DIMS: the batch's ``item`` index)."""
    return lambda pipe: pipe.zscore(p.index_key(tenant, "item", batch), rid)


def _with_transcript(run: dict[Any, Any], transcript: Any) -> dict[Any, Any]:
    """The run hash's fields, and the transcript key's value when it has one (RunField.TRANSCRIPT)."""
    if transcript is None:
        return run
    return {**run, RunField.TRANSCRIPT: transcript}
