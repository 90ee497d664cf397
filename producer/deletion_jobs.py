"""Deletions by metadata (POST /v1/deletions): every run of a tenant whose metadata has the given
``key=value`` terms, in Redis and the archive, as a job with progress that the workers run.

A deletion is a hash at its tenant's home partition (keys.Partition.deletion, fields
shared.fields.DeletionField) and an entry of that partition's deletions set, due at once. A worker's
deleter claims one due deletion a partition (deletion_claim.lua, for a lease), deletes at most
AGENTMILL_DELETION_STEP of its runs (producer.deletion.Eraser, run after run), counts them, and puts
the deletion back, due again, or marks it done when none is left: bounded work a step, with the other
deletions and the pool's own work in between (AGENTMILL_DELETION_PAUSE_MS). A deleter that dies
mid-step leaves its claim to expire; its runs deleted so far stay deleted. Each step also deletes
the archive rows a deletion found locked (producer.deletion.Eraser.erase_deferred).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from typing import TYPE_CHECKING, Any

import orjson

from producer.deletion import Eraser
from shared import keys
from shared.calls.claims import DeletionClaim
from shared.clock import now_ms
from shared.fields import DeletionField
from shared.meta_terms import meta_terms
from shared.replies import text
from shared.script_sending import Parts
from shared.settings import Settings

if TYPE_CHECKING:
    from producer.service import Producer

__all__ = ["CLAIM_MS", "DeletionJobs", "delete_forever"]

D = DeletionField
CLAIM_MS = 60_000  # a step's claim: a deleter that dies mid-step leaves it this long
ERASING = 8  # runs of a step deleted at once
IDLE_S, IDLE_MAX_S = 0.5, 2.0  # a deleter's look when none was due: after 0.5 s, doubling to 2 s
log = logging.getLogger("agentmill.deletion")


class DeletionJobs:
    def __init__(self, producer: Producer) -> None:
        self.eraser = Eraser(producer)
        self.parts, self.scripts, self.settings = producer.parts, producer.scripts, producer.settings
        self.store = self.eraser.store

    async def create(self, tenant: str, metadata: dict[str, Any], actor: str) -> dict[str, Any]:
        """A new deletion of ``tenant``'s runs whose metadata matches ``metadata``; ValueError when
        a value cannot match (not a scalar, too long) or nothing is given."""
        terms = meta_terms(metadata)
        if not metadata or len(terms) != len(metadata):
            raise ValueError(
                "metadata: one to a few keys, each a string, number or boolean of bounded length"
            )
        did = "del_" + secrets.token_hex(12)
        home = self.parts.home(tenant)
        key = home.deletion(tenant, did)
        fields = {D.DELETION_ID: did, D.TENANT: tenant, D.METADATA: orjson.dumps(metadata), D.STATE: "pending",
                  D.MATCHED: 0, D.DELETED: 0, D.ACTOR: actor, D.CREATED_AT: now_ms()}  # fmt: skip

        def op(pipe: Any) -> None:
            pipe.hset(key, mapping=fields)
            pipe.expire(key, self.settings.tombstone_retention_s)
            pipe.zadd(home.deletions, {key: 0})

        await self.parts.pipelined([(home, op)])
        return view({k.value: text(v) for k, v in fields.items()})

    async def get(self, tenant: str, deletion_id: str) -> dict[str, Any] | None:
        home = self.parts.home(tenant)
        key = home.deletion(tenant, deletion_id)
        raw = await self.parts.call(home, lambda c: c.hgetall(key))  # type: ignore[arg-type,return-value]
        h = {text(k): text(v) for k, v in raw.items()}
        return view(h) if h and h.get(D.TENANT) == tenant else None

    async def step(self) -> int:
        """One step of one due deletion on each partition. How many deletions stepped."""
        out = self.parts.sending()  # the claims: one round trip per node
        for p in self.parts.parts:
            out.add_script(
                p,
                self.scripts.deletion_claim,
                *self.scripts.framing.frame(p, [p.deletions], DeletionClaim(CLAIM_MS).argv()),
            )
        stepped = min(1, await self.eraser.erase_deferred())  # archive rows a deletion found locked
        for p, claimed in zip(self.parts.parts, await out.replies(), strict=True):
            if isinstance(claimed, BaseException):
                raise claimed
            if claimed:
                await self._step(p, text(claimed[0]))
                stepped += 1
        return stepped

    async def _step(self, home: keys.Partition, key: str) -> None:
        raw = await self.parts.call(home, lambda c: c.hgetall(key))  # type: ignore[arg-type,return-value]
        h = {text(k): text(v) for k, v in raw.items()}
        if not h:  # expired: nothing to do
            await self.parts.call(home, lambda c: c.zrem(home.deletions, key))
            return
        tenant, actor = h[D.TENANT], h.get(D.ACTOR, "")
        terms = meta_terms(orjson.loads(h[D.METADATA]))
        limit = self.settings.deletion_step
        live = await self._live(tenant, terms, limit)
        ids = [rid for _, rid in live]
        if len(ids) < limit and self.store is not None:
            ids += await self.store.key_ids_where(tenant, terms=terms, limit=limit - len(ids))
        at, n, todo = now_ms(), 0, list(dict.fromkeys(ids))
        for k in range(0, len(todo), ERASING):  # a few at once: the step's time, not its work, shrinks
            erased = await asyncio.gather(
                *(self.eraser.erase(rid, tenant, actor, at) for rid in todo[k : k + ERASING])
            )
            n += sum(min(1, d) for d in erased)
        await self._unindex(tenant, terms, live)
        left = await self._remaining(tenant, terms)

        def note(pipe: Any) -> None:
            pipe.hincrby(key, D.DELETED, n)
            pipe.hget(key, D.DELETED)

        deleted = int(text((await self.parts.pipelined([(home, note)]))[0][1]) or 0)
        done = left == 0

        def settle(pipe: Any) -> None:
            pipe.hset(key, mapping={D.MATCHED: deleted + left, D.STATE: "done" if done else "running",
                                    **({D.FINISHED_AT: now_ms()} if done else {})})  # fmt: skip
            if done:
                pipe.zrem(home.deletions, key)
            else:
                pipe.zadd(home.deletions, {key: 0})

        await self.parts.pipelined([(home, settle)])

    async def _live(self, tenant: str, terms: list[str], limit: int) -> list[tuple[keys.Partition, str]]:
        """Up to ``limit`` runs in Redis's listing indexes with every term (the first term's index on
        every partition, then the others checked)."""

        def op(pipe: Any, p: keys.Partition) -> None:
            pipe.zrange(p.index_key(tenant, "meta", terms[0]), 0, limit - 1)

        found = [(p, text(i)) for p, r in zip(self.parts.parts, await self.parts.each(op), strict=True)
                 for i in r[0]]  # fmt: skip
        if len(terms) == 1 or not found:
            return found[:limit]

        def check(p: keys.Partition, rid: str) -> Any:
            return lambda pipe: [pipe.zscore(p.index_key(tenant, "meta", t), rid) for t in terms[1:]]

        scores = await self.parts.pipelined([(p, check(p, rid)) for p, rid in found])
        return [f for f, s in zip(found, scores, strict=True) if all(x is not None for x in s)][:limit]

    async def _unindex(self, tenant: str, terms: list[str], live: list[tuple[keys.Partition, str]]) -> None:
        """Index entries left of runs whose hash had expired already: out, so the next step moves on."""
        if not live:
            return

        def unindex(p: keys.Partition, rid: str) -> Any:
            return lambda pipe: [pipe.zrem(p.index_key(tenant, "meta", t), rid) for t in terms]

        await self.parts.pipelined([(p, unindex(p, rid)) for p, rid in live])

    async def _remaining(self, tenant: str, terms: list[str]) -> int:
        def op(pipe: Any, p: keys.Partition) -> None:
            pipe.zcard(p.index_key(tenant, "meta", terms[0]))

        n = sum(int(r[0]) for r in await self.parts.each(op))
        if self.store is not None:
            n += await self.store.count_where(tenant, terms)
        return n


def view(h: dict[str, str]) -> dict[str, Any]:
    """A deletion as GET /v1/deletions/{id} answers it (api.DeletionView's JSON)."""
    return {
        "deletionId": h.get(D.DELETION_ID, ""),
        "state": h.get(D.STATE, "pending"),
        "metadata": orjson.loads(h.get(D.METADATA) or "{}"),
        "matched": int(h.get(D.MATCHED) or 0),
        "deleted": int(h.get(D.DELETED) or 0),
        "createdAt": int(h.get(D.CREATED_AT) or 0),
        "finishedAt": int(h[D.FINISHED_AT]) if h.get(D.FINISHED_AT) else None,
    }


async def delete_forever(parts: Parts, settings: Settings, stop: asyncio.Event | None = None) -> None:
    """A worker's deleter: steps the due deletions, pausing AGENTMILL_DELETION_PAUSE_MS between steps;
    when none is due it looks again after half a second, then less often while none comes, up to
    IDLE_MAX_S (a new deletion starts within that); a failure (Redis or the archive down) backs off
    and retries."""
    from producer.service import Producer  # the worker builds one for its deleter alone

    producer = Producer(parts, settings=settings)
    jobs = DeletionJobs(producer)
    pause = IDLE_S  # the next look's pause when none is due
    try:
        while stop is None or not stop.is_set():
            try:
                stepped = await jobs.step()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("deletion: step failed: %s", exc)
                stepped = 0
                await asyncio.sleep(2.0)
            if stepped:
                pause = IDLE_S
                await asyncio.sleep(settings.deletion_pause_ms / 1000)
            else:
                await asyncio.sleep(pause)
                pause = min(IDLE_MAX_S, pause * 2)
    finally:
        if producer.archive is not None:
            with contextlib.suppress(Exception):
                await producer.archive.aclose()
