"""Deleting what a tenant's runs left: one run with its sub-agents (DELETE /v1/runs/{id}), every run
of a session (DELETE /v1/sessions/{id}); deletions by metadata step through runs with the same
``Eraser`` (producer/deletion_jobs.py).

A run is erased in this order: aborted if it has not ended (the abort path: a queued or parked run
ends at once, a running one's worker is asked to stop), its children erased first, then one script
on its partition (delete_run.lua) deletes every key and entry of it and leaves its tombstone, then its
archive rows go. Their delete waits AGENTMILL_DELETION_LOCK_TIMEOUT_MS at most for rows another
transaction holds (an archiver's write, its worker paused or slow): past it the run is put in its
home partition's archive erasures, which the workers' deleters delete in the background
(``erase_deferred``), and the archiver deletes what it writes of a run with a tombstone anyway. The tombstone, written with the deletion, is what every late writer finds: a worker
still holding the run is refused at its next write (no run hash), the archiver deletes rows it wrote
meanwhile (archive_done.lua names the run), a webhook delivery under way drops its state, and no
submission (a resubmission, a schedule's firing) creates the run again while it lasts.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from agentmill_client.statuses import RunStatus
from shared import keys
from shared.archive.deletion import ArchiveBusyError
from shared.calls.erasure import DeleteRun, DeleteRunVerdict
from shared.clock import now_ms
from shared.fields import RunField
from shared.meta_terms import meta_terms
from shared.replies import text
from shared.script_sending import run_script

if TYPE_CHECKING:
    from producer.service import Producer

__all__ = ["Deleted", "Eraser", "ParentRunningError"]

F = RunField
_READ = [F.STATUS, F.SESSION_ID, F.INPUT, F.CHILDREN, F.TENANT]
MAX_DEPTH = 16  # sub-agents' depth is bounded far below this (profiles' maxDepth)
# An ended run's worker writes its job's last record a moment after the ending; the deletion waits for
# it (DeleteRunVerdict.FINISHING) up to JOB_FINISH_WAITS × JOB_FINISH_WAIT_S: past that the worker is
# gone (its job key expires) and the run is deleted anyway.
JOB_FINISH_WAITS = 100
JOB_FINISH_WAIT_S = 0.02


class ParentRunningError(Exception):
    """A sub-agent's run whose parent has not ended: delete the parent (it takes its children)."""


@dataclass(frozen=True, slots=True)
class Deleted:
    run_id: str  # as its tenant knows it
    deleted_at: int  # ms
    runs: int  # runs deleted, its sub-agents' included; 0 when it was deleted before
    already: bool  # deleted before: what its tombstone says
    archive_pending: bool = False  # its archive rows were locked: the deleters delete them later


class Eraser:
    """Deletes a tenant's runs and sessions on the producer's Redis and archive."""

    def __init__(self, producer: Producer) -> None:
        self.producer = producer
        self.parts, self.scripts, self.settings = producer.parts, producer.scripts, producer.settings
        self.store = producer.archive.store if producer.archive is not None else None

    # ---- one run ----

    async def delete_run(self, client_id: str, tenant: str, actor: str) -> Deleted | None:
        """The run ``tenant`` knows by ``client_id``, with its sub-agents' runs. None: no such run and
        no tombstone of one; a tombstone: ``already``. ParentRunningError for a child whose parent runs."""
        rec = await self.producer.get(client_id, tenant=tenant)
        if rec is None:
            for key in self.producer.scope(tenant).lookups(client_id):
                tomb = await self.tombstone(key, tenant)
                if tomb is not None:
                    return Deleted(client_id, int(tomb.get("deletedAt", 0)), 0, True)
            return None
        if rec.parent_run_id:
            parent = await self.producer.get(rec.parent_run_id, tenant=tenant)
            if parent is not None and not parent.status.terminal:
                raise ParentRunningError(f"run {client_id} is a sub-agent of run {rec.parent_run_id}, which has "
                                         "not ended: delete that run")  # fmt: skip
        at, pending = now_ms(), list[str]()
        n = await self.erase(rec.key, tenant, actor, at, pending=pending)
        return Deleted(client_id, at, n, False, bool(pending))

    async def tombstone(self, key: str, tenant: str) -> dict[str, Any] | None:
        """The tombstone of ``tenant``'s run kept under ``key`` (at its home partition), if it lasts."""
        home = self.parts.home(key)
        raw = await self.parts.call(home, lambda c: c.get(home.gone(key)))
        if raw is None:
            return None
        tomb: dict[str, Any] = orjson.loads(raw)
        return tomb if tomb.get("tenant") == tenant else None

    async def erase(
        self, key: str, tenant: str, actor: str, at: int, depth: int = 0, pending: list[str] | None = None
    ) -> int:
        """Delete the run kept under ``key`` and its sub-agents' runs, in Redis and the archive; leave
        its tombstone. How many runs went (0: none was left). A run whose archive rows were locked
        past the bounded wait is deferred to the deleters (and named in ``pending``)."""
        tomb = orjson.dumps({"runId": key, "tenant": tenant, "deletedAt": at, "actor": actor})
        n = 0
        part = await self.parts.locate(key)
        if part is not None:
            n += await self._erase_live(part, key, tenant, actor, at, tomb, depth, pending)
        home = self.parts.home(key)
        ttl = self.settings.tombstone_retention_s

        def at_home(pipe: Any) -> None:  # a resubmission at the run's home finds it too
            pipe.set(home.gone(key), tomb, ex=ttl)
            pipe.delete(home.pointer(key))

        await self.parts.pipelined([(home, at_home)])
        if self.store is not None:
            try:
                archived = await self.store.delete_runs(
                    [key], tenant, lock_timeout_ms=self.settings.deletion_lock_timeout_ms
                )
            except ArchiveBusyError:
                await self._defer(home, key, tenant, now_ms())
                if pending is not None:
                    pending.append(key)
                archived = 0
            n = max(n, archived) if part is not None else archived
        return n

    async def _defer(self, home: keys.Partition, key: str, tenant: str, due: int) -> None:
        member = orjson.dumps({"key": key, "tenant": tenant})
        await self.parts.call(home, lambda c: c.zadd(home.archive_erasures, {member: due}))

    async def erase_deferred(self, limit: int = 16, retry_ms: int = 2000) -> int:
        """Delete the archive rows of deleted runs that were locked when they were deleted (up to
        ``limit`` a partition); those still locked are tried again ``retry_ms`` later. How many went."""
        if self.store is None:
            return 0
        done = 0
        for p in self.parts.parts:
            now = now_ms()

            def due(c: Any, p: keys.Partition = p, now: int = now) -> Any:
                return c.zrangebyscore(p.archive_erasures, 0, now, start=0, num=limit)

            for raw in await self.parts.call(p, due):
                entry = orjson.loads(raw)
                try:
                    await self.store.delete_runs(
                        [entry["key"]],
                        entry["tenant"],
                        lock_timeout_ms=self.settings.deletion_lock_timeout_ms,
                    )
                except ArchiveBusyError:
                    await self._defer(p, entry["key"], entry["tenant"], now + retry_ms)
                    continue

                def drop(c: Any, p: keys.Partition = p, raw: bytes = raw) -> Any:
                    return c.zrem(p.archive_erasures, raw)

                await self.parts.call(p, drop)
                done += 1
        return done

    async def _erase_live(
        self,
        part: keys.Partition,
        key: str,
        tenant: str,
        actor: str,
        at: int,
        tomb: bytes,
        depth: int,
        pending: list[str] | None,
    ) -> int:
        run = part.run(key)
        h = [text(v) for v in await self.parts.call(part, lambda c: c.hmget(run, _READ))]  # type: ignore[arg-type,return-value]
        if not h[0]:
            return 0
        if h[4] != tenant:
            return 0
        if not RunStatus(h[0]).terminal:  # the abort path first: its worker stops, its children too
            await self.producer.abort(key, reason="deleted", tenant=tenant)
        n = 0
        if depth < MAX_DEPTH:
            for child in await self._children(key, tenant, h[3]):
                n += await self.erase(child, tenant, actor, at, depth + 1, pending)
        moved, waits = 0, 0
        while moved < 5:  # its session, as read; read again if it changed in between
            h = [text(v) for v in await self.parts.call(part, lambda c: c.hmget(run, _READ))]  # type: ignore[arg-type,return-value]
            if not h[0]:
                return n
            terms = _terms(h[2])
            sid = h[1]
            call = DeleteRun(
                key,
                tenant,
                tomb,
                self.settings.tombstone_retention_s,
                sid,
                int(waits < JOB_FINISH_WAITS),
                len(terms),
                tuple(terms),
            )
            reply = await run_script(
                self.parts,
                self.scripts.delete_run,
                *self.scripts.framing.call(part, call.keys(part), call.argv()),
            )
            verdict = call.verdict(reply)
            if verdict is DeleteRunVerdict.FINISHING:  # its worker's last write comes in a moment
                waits += 1
                await asyncio.sleep(JOB_FINISH_WAIT_S)
                continue
            if verdict is not DeleteRunVerdict.MOVED:
                return n + (1 if verdict is DeleteRunVerdict.DELETED else 0)
            moved += 1
        raise RuntimeError(f"run {key}: its session kept changing while it was deleted")

    async def _children(self, key: str, tenant: str, children_raw: str) -> list[str]:
        """The ids of the run's sub-agents' runs: its tenant's parent index on every partition, and
        those of its current round (run field children)."""

        def op(pipe: Any, p: keys.Partition) -> None:
            pipe.zrange(p.index_key(tenant, "parent", key), 0, -1)

        found = {text(i) for r in await self.parts.each(op) for i in r[0]}
        if children_raw:
            with contextlib.suppress(orjson.JSONDecodeError, TypeError, AttributeError):
                found |= {str(c["runId"]) for c in orjson.loads(children_raw) if c.get("runId")}
        return sorted(found)

    # ---- a session ----

    async def delete_session(self, client_id: str, tenant: str, actor: str) -> int | None:
        """Every run of the session ``tenant`` knows by ``client_id`` (in Redis and the archive), then
        what is left of the session. How many runs went; None: no such session."""
        for skey in self.producer.scope(tenant).lookups(client_id):
            home = self.parts.home(skey)

            def op(pipe: Any, home: keys.Partition = home, skey: str = skey) -> None:
                pipe.hget(home.session(skey), "tenant")
                pipe.lrange(home.session_runs(skey), 0, -1)

            owner, runs = (await self.parts.pipelined([(home, op)]))[0]
            ids = [text(r) for r in runs] if text(owner) == tenant else []
            if self.store is not None:
                ids += await self.store.key_ids_where(tenant, session_id=skey, limit=100_000)
            if not ids and text(owner) != tenant:
                continue
            at, n = now_ms(), 0
            for rid in dict.fromkeys(ids):
                n += await self.erase(rid, tenant, actor, at)

            def drop(pipe: Any, home: keys.Partition = home, skey: str = skey) -> None:
                pipe.delete(*home.session_keys(skey))

            await self.parts.pipelined([(home, drop)])
            return n
        return None


def _terms(raw_input: str) -> list[str]:
    """The listing terms of a run's metadata, from its input JSON ([] once archived: no entries)."""
    try:
        metadata = orjson.loads(raw_input).get("metadata") if raw_input else None
    except (orjson.JSONDecodeError, AttributeError):
        return []
    return meta_terms(metadata) if isinstance(metadata, dict) else []
