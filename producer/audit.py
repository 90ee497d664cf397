"""The audit log: who did what to a tenant's runs, batches, schedules and keys. One Redis stream per
tenant at the tenant's home partition (keys.Partition.audit), trimmed with ``MAXLEN ~``
AGENTMILL_AUDIT_MAX_ENTRIES; an entry's id is its time (Redis's clock) and its place in the log.

Only the API writes it, as a side effect of the action it records: no route writes it directly.
``record`` writes one entry (one round trip); ``command`` is the same XADD for a caller that sends
it in the round trip of the action itself (a submission: producer.submitter). An entry written in
the action's round trip is written as the action is sent: a resent submission is recorded again.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import orjson

from shared import keys
from shared.fields import AuditField as AF
from shared.script_sending import Parts

__all__ = [
    "MAX_PAGE", "Action", "Actor", "AuditQuery", "Pending", "command", "entry_on", "read", "record",
    "request_id_of",
]  # fmt: skip

MAX_PAGE = 1000
_SCAN_PAGES = 10  # a filtered read scans at most this many pages' worth of entries per call
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}\Z")


class Action(StrEnum):
    SUBMIT = "submit"
    BATCH_CREATE = "batch_create"
    BATCH_ABORT = "batch_abort"
    BATCH_RETRY = "batch_retry"
    ABORT = "abort"
    APPROVE = "approve"
    REJECT = "reject"
    TOOL_RESULT = "tool_result"
    RETRY = "retry"
    FORK = "fork"
    SCHEDULE_CREATE = "schedule_create"
    SCHEDULE_PAUSE = "schedule_pause"
    SCHEDULE_RESUME = "schedule_resume"
    SCHEDULE_DELETE = "schedule_delete"
    KEY_CREATE = "key_create"
    KEY_REVOKE = "key_revoke"
    DELETE = "delete"
    AGENT_CREATE = "agent_create"
    AGENT_POINT = "agent_point"
    AGENT_DELETE = "agent_delete"


@dataclass(frozen=True, slots=True)
class Actor:
    """Who acted: a key id and its name, or ``token-file`` (a token of the token file), or ``cli``."""

    id: str
    name: str = ""
    request_id: str = ""


# The commands of an entry whose target is known only as the action is sent (a submission's run
# id): target -> [(partition, command)].
Pending = Callable[[str], list[tuple[keys.Partition, tuple[Any, ...]]]]


def request_id_of(header: str | None) -> str:
    """The caller's X-Request-Id when it is a plain one, else a new id."""
    if header and _REQUEST_ID.match(header):
        return header
    return uuid.uuid4().hex


def _fields(tenant: str, actor: Actor, action: Action, target: str, detail: str) -> dict[str, str]:
    return {
        AF.ACTION: action.value, AF.TARGET: target[:300], AF.ACTOR: actor.id, AF.ACTOR_NAME: actor.name,
        AF.TENANT: tenant, AF.REQUEST_ID: actor.request_id, AF.DETAIL: detail[:300],
    }  # fmt: skip


def command(
    parts: Parts,
    max_entries: int,
    tenant: str,
    actor: Actor,
    action: Action,
    target: str,
    detail: str = "",
    *,
    archived: bool = False,
) -> list[tuple[keys.Partition, tuple[Any, ...]]]:
    """The XADD of one entry, and the partition it goes to (``Sending.add``); ``archived`` (the
    archive on): with the SADD naming the tenant among those whose logs the archiver copies."""
    part = parts.home(tenant)
    flat = [x for kv in _fields(tenant, actor, action, target, detail).items() for x in kv]
    out: list[tuple[keys.Partition, tuple[Any, ...]]] = [
        (part, ("XADD", part.audit(tenant), "MAXLEN", "~", max_entries, "*", *flat))
    ]
    if archived:
        first = parts.parts[0]
        out.append((first, ("SADD", first.audit_tenants, tenant)))
    return out


def entry_on(
    cmds: list[tuple[keys.Partition, tuple[Any, ...]]], part: keys.Partition
) -> tuple[bytes, list[tuple[keys.Partition, tuple[Any, ...]]]]:
    """``command``'s XADD as a script on ``part`` writes it (JSON: [max entries, field, value, …];
    b'' when the entry goes to another partition), and the commands left to send beside it."""
    for i, (p, cmd) in enumerate(cmds):
        if p is part and cmd[0] == "XADD":
            return orjson.dumps([cmd[4], *cmd[6:]]), [c for j, c in enumerate(cmds) if j != i]
    return b"", cmds


async def record(
    parts: Parts,
    max_entries: int,
    tenant: str,
    actor: Actor,
    action: Action,
    target: str,
    detail: str = "",
    *,
    archived: bool = False,
) -> None:
    """Write one entry to ``tenant``'s audit log (one round trip per node)."""
    cmds = command(parts, max_entries, tenant, actor, action, target, detail, archived=archived)

    def op(cmd: tuple[Any, ...]) -> Any:
        return lambda pipe: pipe.execute_command(*cmd)

    await parts.pipelined([(part, op(cmd)) for part, cmd in cmds])


@dataclass(frozen=True, slots=True)
class AuditQuery:
    """``from_ms``/``to_ms``: the entries' time range (inclusive); ``after``: the cursor (an entry id)."""

    from_ms: int | None = None
    to_ms: int | None = None
    action: str | None = None
    target: str | None = None
    after: str | None = None
    limit: int = 100


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _entry(entry_id: str, raw: dict[Any, Any]) -> dict[str, Any]:
    h = {_text(k): _text(v) for k, v in raw.items()}
    return {
        "id": entry_id, "at": int(entry_id.partition("-")[0]), "action": h.get(AF.ACTION, ""),
        "target": h.get(AF.TARGET, ""), "actor": h.get(AF.ACTOR, ""), "actorName": h.get(AF.ACTOR_NAME, ""),
        "tenant": h.get(AF.TENANT, ""), "requestId": h.get(AF.REQUEST_ID, ""), "detail": h.get(AF.DETAIL, ""),
    }  # fmt: skip


async def read(
    parts: Parts, tenant: str, q: AuditQuery, archive: Any = None
) -> tuple[list[dict[str, Any]], str | None]:
    """A page of ``tenant``'s entries, oldest first, and the cursor of the next (None: no more).
    A filtered read scans a bounded number of entries: its page may be short with a cursor. With
    the ``archive`` (shared.archive.store.ArchiveStore): what Redis no longer holds is read there
    first, then the rest from Redis."""
    if archive is not None:
        older = await _from_archive(parts, tenant, q, archive)
        if older is not None:
            return older
    return await _from_redis(parts, tenant, q)


def _place(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


async def _from_archive(
    parts: Parts, tenant: str, q: AuditQuery, archive: Any
) -> tuple[list[dict[str, Any]], str | None] | None:
    """The page from the archive when Redis no longer holds the page's start (None: it does)."""
    from shared.archive.audit_copy import audit_page

    part = parts.home(tenant)

    async def oldest(c: Any) -> list[Any]:
        return await c.xrange(part.audit(tenant), "-", "+", count=1)  # type: ignore[no-any-return]

    first = await parts.call(part, oldest)
    after = _place(q.after) if q.after else ((q.from_ms, -1) if q.from_ms is not None else None)
    if first and after is not None and after >= _place(_text(first[0][0])):
        return None  # Redis holds everything from the start on
    got = await audit_page(archive, tenant, after, q.to_ms, q.limit, q.action, q.target)
    if len(got) == q.limit:
        return got, got[-1]["id"]
    cursor = got[-1]["id"] if got else q.after
    rest, nxt = await _from_redis(parts, tenant, AuditQuery(
        q.from_ms, q.to_ms, q.action, q.target, cursor, q.limit - len(got)
    ))  # fmt: skip
    seen = {e["id"] for e in got}
    return got + [e for e in rest if e["id"] not in seen], nxt


async def _from_redis(parts: Parts, tenant: str, q: AuditQuery) -> tuple[list[dict[str, Any]], str | None]:
    part = parts.home(tenant)
    stream = part.audit(tenant)
    start = f"({q.after}" if q.after else (f"{q.from_ms}-0" if q.from_ms is not None else "-")
    end = f"{q.to_ms}-18446744073709551615" if q.to_ms is not None else "+"
    out: list[dict[str, Any]] = []
    last: str | None = None
    for _ in range(_SCAN_PAGES):

        async def page(c: Any, start: str = start) -> list[Any]:
            return await c.xrange(stream, start, end, count=q.limit)  # type: ignore[no-any-return]

        got = await parts.call(part, page)
        for entry_id, raw in got:
            last = _text(entry_id)
            e = _entry(last, raw)
            if (q.action is None or e["action"] == q.action) and (
                q.target is None or e["target"] == q.target
            ):
                out.append(e)
                if len(out) == q.limit:
                    return out, last
        if len(got) < q.limit:
            return out, None
        start = f"({last}"
    return out, last
