"""Finding runs: a tenant's runs listed by filters, newest first, and batches with their progress.

Both read what the scripts keep (shared/scripts.py): per-tenant sorted sets of runIds by creation
time, one per filter value (keys.index_key), and one hash of counters per batch (keys.batch_key),
updated by every script that changes a run's status, in the same call. Nothing here scans Redis.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import orjson

from producer.submission import scoped_id
from shared import keys
from shared.ids import is_valid_id
from shared.models import RunStatus
from shared.scripts import text
from shared.statuses import ACTIVE

if TYPE_CHECKING:
    from producer.service import Producer

__all__ = [
    "SCAN_MAX",
    "STATUSES",
    "Catalog",
    "ListingError",
    "RunFilter",
    "batch_body",
    "batch_delivery_key",
    "batch_view",
    "decode_cursor",
    "encode_cursor",
]

STATUSES = tuple(s.value for s in RunStatus)
SCAN_MAX = 5_000  # index entries one listing call looks at, at most; the cursor continues after them


class ListingError(ValueError):
    """A filter or cursor that cannot be used; ``field`` names the query parameter."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


@dataclass(frozen=True, slots=True)
class RunFilter:
    status: str | None = None
    agent: str | None = None
    session_id: str | None = None
    batch_id: str | None = None
    metadata: tuple[str, ...] = ()  # "key=value" terms, as producer.submission.meta_term writes them
    created_after: int | None = None  # ms, exclusive
    created_before: int | None = None  # ms, exclusive

    def pairs(self) -> list[str]:
        """(dimension, value) pairs of the indexes to intersect, flattened."""
        out: list[str] = []
        if self.status is not None:
            if self.status not in STATUSES:
                raise ListingError("status", f"one of {', '.join(STATUSES)}")
            out += ["status", self.status]
        if self.agent is not None:
            out += ["agent", self.agent]
        for name, value, dim in (
            ("sessionId", self.session_id, "session"),
            ("batchId", self.batch_id, "batch"),
        ):
            if value is not None:
                if not is_valid_id(value):
                    raise ListingError(name, "not a valid id")
                out += [dim, value]
        for term in self.metadata:
            if "=" not in term or term.startswith("="):
                raise ListingError("metadata", f"{term!r} is not key=value")
            out += ["meta", term]
        return out


def encode_cursor(score: str, run_id: str) -> str:
    return base64.urlsafe_b64encode(f"{score}:{run_id}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[str, str]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        score, _, run_id = raw.partition(":")
        int(score)
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise ListingError("cursor", "not a cursor this API returned") from None
    if not is_valid_id(run_id):
        raise ListingError("cursor", "not a cursor this API returned")
    return score, run_id


def _summary(fields: list[Any]) -> dict[str, Any]:
    run_id, status, created, session, agent, batch, finished, client_id = (text(f) for f in fields)
    d: dict[str, Any] = {
        "runId": client_id or run_id,
        "status": status,
        "createdAt": int(created or 0),
        "agent": agent,
    }
    if session:
        d["sessionId"] = session
    if batch:
        d["batchId"] = batch
    if finished:
        d["finishedAt"] = int(finished)
    return d


def batch_view(h: dict[str, str]) -> dict[str, Any]:
    """A batch's counters as the API shows them (and its webhook sends)."""
    total = int(h.get("total") or 0)
    done = int(h.get("done") or 0)
    counts = {s: max(0, int(h.get(s) or 0)) for s in STATUSES}
    finished = h.get("finishedAt")
    ended = done >= total and h.get("open") != "1"  # open: a part said more are to come
    return {
        "batchId": h.get("batchId", ""),
        "total": total,
        "counts": counts,
        "done": done,
        "progress": round(done / total, 4) if total else 1.0,
        "createdAt": int(h.get("createdAt") or 0),
        "finishedAt": int(finished) if finished and ended else None,
        "finished": ended,
    }


class Catalog:
    """Listing and batch reads and controls of one producer, always within one tenant."""

    def __init__(self, producer: Producer) -> None:
        self.p = producer

    async def list_runs(
        self, tenant: str, flt: RunFilter, *, limit: int = 50, cursor: str | None = None
    ) -> tuple[list[dict[str, Any]], str | None]:
        """One page, newest first, and the cursor of the next page (None at the end)."""
        if flt.session_id is not None:
            flt = replace(flt, session_id=await self._own_session(tenant, flt.session_id))
        pairs = flt.pairs()
        cs, cid = decode_cursor(cursor) if cursor else ("", "")
        args = [
            tenant, limit, SCAN_MAX, cs, cid,
            "" if flt.created_after is None else flt.created_after,
            "" if flt.created_before is None else flt.created_before,
            len(pairs) // 2, *pairs,
        ]  # fmt: skip
        reply = await self.p.scripts.list_runs(args=args)
        items = [_summary(reply[k : k + 8]) for k in range(2, len(reply), 8)]
        nxt = encode_cursor(text(reply[0]), text(reply[1])) if text(reply[0]) else None
        return items, nxt

    async def _own_session(self, tenant: str, session_id: str) -> str:
        """The id the tenant's session ``session_id`` is kept under (scoped when another tenant holds it)."""
        scoped = scoped_id(tenant, session_id)
        async with self.p.redis.pipeline(transaction=False) as pipe:
            pipe.hget(keys.session_key(session_id), "tenant")
            pipe.hget(keys.session_key(scoped), "tenant")
            own, other = await pipe.execute()
        if (own is None or text(own) != tenant) and other is not None and text(other) == tenant:
            return scoped
        return session_id

    async def batch(self, tenant: str, batch_id: str) -> dict[str, Any] | None:
        raw = await self.p.redis.hgetall(keys.batch_key(tenant, batch_id))  # type: ignore[misc]
        if not raw:
            return None
        return batch_view({text(k): text(v) for k, v in raw.items()})

    async def abort_batch(self, tenant: str, batch_id: str, reason: str) -> dict[str, int]:
        """Abort every run of the batch that has not ended; counts of the abort verdicts."""
        verdicts: dict[str, int] = {"aborted": 0, "requested": 0, "finished": 0}
        for status in sorted(ACTIVE, key=lambda s: (s == RunStatus.RUNNING, s.value)):  # running ones last
            cursor: str | None = None
            while True:
                page, cursor = await self.list_runs(
                    tenant, RunFilter(batch_id=batch_id, status=status), limit=500, cursor=cursor
                )
                for verdict in await self._abort_many([r["runId"] for r in page], reason, tenant):
                    if verdict in verdicts:
                        verdicts[verdict] += 1
                if cursor is None:
                    break
        return verdicts

    async def _abort_many(self, run_ids: list[str], reason: str, tenant: str) -> list[str]:
        s = self.p.settings
        async with self.p.redis.pipeline(transaction=False) as pipe:
            for rid in run_ids:
                await self.p.scripts.abort(
                    keys=[keys.run_key(rid), keys.events_stream(rid), keys.tools_key(rid), keys.LIVE],
                    args=[rid, reason, s.stream_maxlen, s.retention_s, tenant],
                    client=pipe,
                )
            replies = await pipe.execute()
        return [text(r[0]) for r in replies]


def batch_delivery_key(delivery_id: str) -> str | None:
    """The batch hash a webhook delivery id names, or None for a run's delivery."""
    if delivery_id.startswith(keys.BATCH_DELIVERY):
        return delivery_id[len(keys.BATCH_DELIVERY) :]
    return None


def batch_body(h: dict[str, str]) -> bytes:
    return orjson.dumps(batch_view(h))
