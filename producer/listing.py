"""Finding runs: a tenant's runs listed by filters, newest first, and batches with their progress.

Both read what the scripts keep (shared/scripts.py) on every partition: per-tenant sorted sets of
runIds by creation time, one per filter value (keys.Partition.index_key), and one hash of counters
per batch share (keys.Partition.batch, producer.batch_shares), updated by every script that changes a
run's status, in the same call. A listing asks every partition for a page from the same cursor and
merges them (merge_pages). Nothing here scans Redis.
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import orjson

from agentmill_client import limits
from agentmill_client.ids import is_valid_id
from agentmill_client.models import RunStatus
from agentmill_client.statuses import ACTIVE
from producer.batch_shares import merge_batch, read_batch
from producer.run_filter import STATUSES, ListingError, RunFilter
from producer.run_record import lineage_view
from producer.scope import SCOPED_PREFIX
from shared import index_keys, keys
from shared.actors import actor_json
from shared.calls.listing import ListRuns
from shared.calls.runs import Abort
from shared.fields import BatchField, RunField, SessionField
from shared.listing_row import ListingRow
from shared.quotas import NANO_USD
from shared.replies import text
from shared.script_sending import run_many

if TYPE_CHECKING:
    from producer.service import Producer

__all__ = [
    "CURSOR_MAX_CHARS",
    "MS_FORMAT",
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
    "merge_pages",
    "parse_ms",
]

_ACTIVE = frozenset(s.value for s in ACTIVE)  # statuses no archived run has
# Redis reads one listing call makes on a partition, at most (list_runs.lua): index entries looked
# at (matching or not), membership probes and run reads. A page that spends them ends there, possibly
# empty, and its cursor continues after the last entry looked at (a few ms of Redis per call).
SCAN_MAX = 2_000
_SCORE = re.compile(rf"0|[1-9][0-9]{{0,{limits.MAX_MS_DIGITS - 1}}}")  # ASCII digits, as Redis writes scores
_CURSOR_CHARS = re.compile(r"[A-Za-z0-9_-]+")  # base64url, unpadded
MS_FORMAT = f"ms since the epoch, in ASCII digits only, at most {limits.MAX_MS_DIGITS} of them"
CURSOR_MAX_CHARS = -(-(limits.MAX_MS_DIGITS + 1 + limits.MAX_ID_CHARS) // 3) * 4  # "<score>:<runId>" encoded


def encode_cursor(score: str, run_id: str) -> str:
    return base64.urlsafe_b64encode(f"{score}:{run_id}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[str, str]:
    """(score, runId) of a cursor encode_cursor wrote, and nothing else: unpadded base64url of at
    most CURSOR_MAX_CHARS, of ASCII digits (no sign, no leading zero, at most MAX_MS_DIGITS), ":"
    and a valid id, encoded the one way encode_cursor does. Anything else is a ListingError."""
    if len(cursor) <= CURSOR_MAX_CHARS and _CURSOR_CHARS.fullmatch(cursor):
        try:
            raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode("ascii")
        except (binascii.Error, UnicodeDecodeError):
            raw = ""
        score, _, run_id = raw.partition(":")
        if _SCORE.fullmatch(score) and is_valid_id(run_id) and encode_cursor(score, run_id) == cursor:
            return score, run_id
    raise ListingError("cursor", "not a cursor this API returned")


def parse_ms(field: str, value: str) -> int:
    """A time filter (ms since the epoch) as a query writes it: ASCII digits only, at most
    MAX_MS_DIGITS of them (no sign, space, underscore or other digits Python's int() takes)."""
    if not re.fullmatch(rf"[0-9]{{1,{limits.MAX_MS_DIGITS}}}", value):
        raise ListingError(field, MS_FORMAT)
    return int(value)


def _summary(row: ListingRow, shown: dict[str, str]) -> dict[str, Any]:
    """A listed run as its client knows it: ``shown`` maps its session's key to that session's id."""
    session = shown.get(row.session_id, row.session_id)
    d: dict[str, Any] = {
        "runId": row.client_id or row.run_id,
        "status": row.status,
        "createdAt": int(row.created_at or 0),
        "agent": row.agent,
    }
    if session:
        d["sessionId"] = session
    if row.batch:
        d["batchId"] = row.batch
    if row.finished_at:
        d["finishedAt"] = int(row.finished_at)
    if row.iterations:
        d["iterations"] = int(row.iterations)
    if row.error_code:
        d["errorCode"] = row.error_code
    d.update(lineage_view(row.lineage, row.retried_by))
    d["priority"] = int(row.priority or limits.DEFAULT_PRIORITY)
    if row.run_at:
        d["runAt"] = int(row.run_at)
    return d


Row = ListingRow  # a listing's run (list_runs.lua's reply: ListingRow.width() values a run)
Position = tuple[int, str, str]  # where a listing stopped: (createdAt, runId, the score as Redis wrote it)


def merge_pages(replies: list[list[Any]], limit: int) -> tuple[list[tuple[int, Row]], Position | None]:
    """One page from the pages several partitions gave for the same cursor (LIST_RUNS replies): the
    newest ``limit`` runs by (createdAt, runId), each with the index of the reply it came from, and
    where the next page starts (None at the end). A partition that stopped early (its
    page full, or its scan limit reached) only answers for runs at or before where it stopped, so
    the page holds no run past the least advanced such position, and the next page starts there
    at the latest: no run is skipped, none is listed twice."""
    rows: list[tuple[int, Row]] = []
    stops: list[Position] = []
    for index, reply in enumerate(replies):
        if text(reply[0]):
            stops.append((int(text(reply[0])), text(reply[1]), text(reply[0])))
        width = Row.width()
        rows += [(index, Row.parse(reply[k : k + width])) for k in range(2, len(reply), width)]

    def order(r: tuple[int, Row]) -> tuple[int, str]:
        return int(r[1].created_at or 0), r[1].run_id

    bound = max(stops) if stops else None
    if bound is not None and len(replies) > 1:
        rows = [r for r in rows if order(r) >= bound[:2]]
    rows.sort(key=order, reverse=True)
    if len(rows) > limit:
        rows = rows[:limit]
        last = rows[-1][1]
        return rows, (int(last.created_at or 0), last.run_id, last.created_at)
    return rows, bound


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
        "usage": batch_usage(h),
    }


_TOTALS = {"inputTokens": (BatchField.INPUT_TOKENS, BatchField.ECONOMY_INPUT_TOKENS),
           "outputTokens": (BatchField.OUTPUT_TOKENS, BatchField.ECONOMY_OUTPUT_TOKENS),
           "cacheReadTokens": (BatchField.CACHE_READ_TOKENS, BatchField.ECONOMY_CACHE_READ_TOKENS),
           "cacheWriteTokens": (BatchField.CACHE_WRITE_TOKENS, BatchField.ECONOMY_CACHE_WRITE_TOKENS)}  # fmt: skip


def batch_usage(h: dict[str, str]) -> dict[str, Any]:
    """The usage totals of a batch's ended runs (summed by track() in the scripts as each ends), and
    ``lanes``: the economy lane's share (its own counters) and the standard lane's (the rest)."""
    cost = h.get(BatchField.COST_USD)
    total = {name: int(h.get(f) or 0) for name, (f, _) in _TOTALS.items()}
    economy: dict[str, Any] = {name: int(h.get(e) or 0) for name, (_, e) in _TOTALS.items()}
    standard: dict[str, Any] = {name: total[name] - economy[name] for name in _TOTALS}
    economy_cost = int(h.get(BatchField.ECONOMY_COST) or 0) / NANO_USD
    economy["costUsd"] = round(economy_cost, 9) if cost or economy_cost else None
    standard["costUsd"] = round(float(cost) - economy_cost, 9) if cost else None
    return {
        "inputTokens": total["inputTokens"],
        "outputTokens": total["outputTokens"],
        "estimated": int(h.get(BatchField.ESTIMATED_RUNS) or 0) > 0,
        "costUsd": round(float(cost), 9) if cost else None,
        "cacheReadTokens": total["cacheReadTokens"],
        "cacheWriteTokens": total["cacheWriteTokens"],
        "lanes": {"standard": standard, "economy": economy},
    }


class Catalog:
    """Listing and batch reads and controls of one producer, always within one tenant."""

    def __init__(self, producer: Producer) -> None:
        self.p = producer

    async def list_runs(
        self, tenant: str, flt: RunFilter, *, limit: int = 50, cursor: str | None = None
    ) -> tuple[list[dict[str, Any]], str | None]:
        """One page, newest first, and the cursor of the next page (None at the end)."""
        archived: dict[str, str] = {}  # session keys -> client ids, of runs listed from the archive
        rows, nxt = await self._rows(tenant, flt, limit, cursor, archived)
        shown = await self._client_sessions(rows, flt.session_id)
        return [_summary(r, archived | shown) for _, r in rows], nxt

    async def _client_sessions(
        self, rows: list[tuple[keys.Partition, Row]], asked: str | None
    ) -> dict[str, str]:
        """The ids the client knows the listed runs' sessions by, for those kept under a tenant's key
        (the session asked for, else read from the runs' ``clientSession``: one round trip per node)."""
        keyed = [(part, row) for part, row in rows if row.session_id.startswith(SCOPED_PREFIX)]
        if asked is not None:
            return {row.session_id: asked for _, row in keyed}
        if not keyed:
            return {}

        def hget(key: str) -> Any:
            return lambda pipe: pipe.hget(key, RunField.CLIENT_SESSION)

        replies = await self.p.parts.pipelined([(part, hget(part.run(row.run_id))) for part, row in keyed])
        return {row.session_id: text(r[0]) for (_, row), r in zip(keyed, replies, strict=True) if r[0]}

    async def _rows(
        self,
        tenant: str,
        flt: RunFilter,
        limit: int,
        cursor: str | None,
        archived: dict[str, str] | None = None,
    ) -> tuple[list[tuple[keys.Partition, Row]], str | None]:
        """list_runs' page as rows with their partition. A session's runs all live at its home
        partition: only that one is asked. With ``archived`` and the archive on, the archive's runs
        too, as one more partition (producer.archived), their sessions' client ids put in it."""
        if flt.session_id is not None:
            flt = replace(flt, session_id=await self._own_session(tenant, flt.session_id))
        if flt.parent_run_id is not None and is_valid_id(flt.parent_run_id):  # its children index its key
            flt = replace(flt, parent_run_id=await self.p.resolve(flt.parent_run_id, tenant))
        pairs = flt.pairs()
        cs, cid = decode_cursor(cursor) if cursor is not None else ("", "")
        call = ListRuns(tenant, limit, SCAN_MAX, cs, cid, flt.created_after, flt.created_before, len(pairs) // 2,
                        tuple(pairs))  # fmt: skip
        scripts, parts = self.p.scripts, self.p.parts
        where = [parts.home(flt.session_id)] if flt.session_id is not None else list(parts.parts)
        calls = [scripts.framing.call(q, call.keys(q), call.argv()) for q in where]
        replies = await run_many(parts, scripts.list_runs, calls)
        streams: dict[str, str] = {}
        if archived is not None and self.p.archive is not None and flt.status not in _ACTIVE:
            seen = {text(r[k]) for r in replies for k in range(2, len(r), Row.width())}
            reply, streams, sessions = await self.p.archive.listing_reply(
                tenant, flt, (cs, cid) if cs else None, limit, seen
            )
            replies.append(reply)
            archived.update(sessions)
        rows, at = merge_pages(replies, limit)
        out = [(where[i] if i < len(where) else parts.layout.of_key(streams[r.run_id]), r) for i, r in rows]
        return out, encode_cursor(at[2], at[1]) if at is not None else None

    async def _own_session(self, tenant: str, session_id: str) -> str:
        """The id the tenant's session ``session_id`` is kept under (submission.Scope.lookups: its
        tenant's key of it, or a form of before)."""
        ids = self.p.scope(tenant).lookups(session_id)

        def hget(part: keys.Partition, sid: str) -> tuple[keys.Partition, Any]:
            return part, lambda pipe: pipe.hget(part.session(sid), SessionField.TENANT)

        found = await self.p.parts.pipelined([hget(self.p.parts.home(s), s) for s in ids])
        return next(
            (s for s, (t,) in zip(ids, found, strict=True) if t is not None and text(t) == tenant), ids[0]
        )

    async def batch(self, tenant: str, batch_id: str) -> dict[str, Any] | None:
        """The batch's progress: its shares summed (producer.batch_shares); once Redis has none of
        them (expired AGENTMILL_RETENTION_S after their last write), its archived runs counted
        (producer.archived.ArchiveReads.batch)."""
        h = merge_batch(await read_batch(self.p.parts, tenant, batch_id))
        if h is None and self.p.archive is not None:
            h = await self.p.archive.batch(tenant, batch_id)
        return batch_view(h) if h is not None else None

    async def abort_batch(
        self, tenant: str, batch_id: str, reason: str, actor: dict[str, str] | None = None
    ) -> dict[str, int]:
        """Abort every run of the batch that has not ended (``actor``: who, shared.actors); counts of
        the abort verdicts."""
        verdicts: dict[str, int] = {"aborted": 0, "requested": 0, "finished": 0}
        for status in sorted(ACTIVE, key=lambda s: (s == RunStatus.RUNNING, s.value)):  # running ones last
            cursor: str | None = None
            while True:
                page, cursor = await self._rows(
                    tenant, RunFilter(batch_id=batch_id, status=status), limit=500, cursor=cursor
                )
                for verdict in await self._abort_many(page, reason, tenant, actor_json(actor)):
                    if verdict in verdicts:
                        verdicts[verdict] += 1
                if cursor is None:
                    break
        return verdicts

    async def _abort_many(
        self, rows: list[tuple[keys.Partition, Row]], reason: str, tenant: str, actor: str
    ) -> list[str]:
        """ABORT for each listed run, on its partition: one pipelined round trip per node."""
        if not rows:
            return []
        scripts, parts = self.p.scripts, self.p.parts
        calls = []
        for part, row in rows:
            call = Abort(row.run_id, reason, tenant, actor)
            calls.append((part, *scripts.framing.frame(part, call.keys(part), call.argv())))
        return [Abort.verdict(r).value for r in await run_many(parts, scripts.abort, calls)]


def batch_delivery_key(delivery_id: str) -> str | None:
    """The batch hash a webhook delivery id names, or None for a run's delivery."""
    if delivery_id.startswith(index_keys.BATCH_DELIVERY):
        return delivery_id[len(index_keys.BATCH_DELIVERY) :]
    return None


def batch_body(h: dict[str, str]) -> bytes:
    return orjson.dumps(batch_view(h))
