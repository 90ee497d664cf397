"""A session as ``GET /v1/sessions/{id}`` shows it: its newest runs (limits.SESSION_RUNS_SHOWN, in
submission order), its active run and its history of run loops (the newest 100), each run named by
the id its client knows it by.

Redis keeps the session's hash at its id's home partition, and its runs and loops lists there for
AGENTMILL_RETENTION_S after its latest run ended; its runs' hashes (which name a ``tsc_…`` run by its
client's id) leave with the runs, AGENTMILL_LIVE_RETENTION_S after they were archived. With the
archive on, what Redis no longer has is read there: the client ids of runs gone from Redis, and,
once the lists (or the session's hash) are gone, the session's archived runs and the loops they
added (shared.archive.groups), under the same tenant isolation."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from agentmill_client import limits
from producer.archived import ArchiveReads
from producer.placement import locate_many
from producer.scope import SCOPED_PREFIX, Scope
from shared import keys, payload_crypto
from shared.fields import RunField, SessionField
from shared.replies import text
from shared.script_sending import Parts

__all__ = ["HISTORY_SHOWN", "SessionReads"]

HISTORY_SHOWN = 100  # the newest run loops a session view shows


class SessionReads:
    """``parts``: a producer's partitions; ``scope``: the ids a tenant's sessions are kept under
    (Producer.scope); ``archive``: its archive reads, None without the archive."""

    def __init__(self, parts: Parts, scope: Callable[[str], Scope], archive: ArchiveReads | None) -> None:
        self.parts, self.scope, self.archive = parts, scope, archive

    async def get(self, session_id: str, tenant: str | None) -> dict[str, Any] | None:
        """The session ``tenant`` knows by ``session_id`` (kept under its tenant's key, or a form of
        before: submission.Scope.lookups); None when it has none, in Redis or the archive."""
        for key in [session_id] if tenant is None else self.scope(tenant).lookups(session_id):
            found = await self._get(key, tenant)
            if found is not None:
                found["sessionId"] = session_id
                return found
        return None

    async def _get(self, session_id: str, tenant: str | None) -> dict[str, Any] | None:
        part = self.parts.home(session_id)

        def op(pipe: Any) -> None:
            pipe.hgetall(part.session(session_id))
            pipe.lrange(part.session_runs(session_id), -limits.SESSION_RUNS_SHOWN, -1)  # the newest
            pipe.lrange(part.session_loops(session_id), -HISTORY_SHOWN, -1)

        meta, raw_runs, loops = (await self.parts.pipelined([(part, op)]))[0]
        h = {text(k): text(v) for k, v in meta.items()} if meta else None
        if h is not None and tenant is not None and h.get(SessionField.TENANT) != tenant:
            h = None
        runs = [text(r) for r in raw_runs]
        if h is None or not runs:
            archived = await self._archived(session_id, tenant, h, part)
            if archived is not None:
                return archived
        if h is None:
            return None
        history = [payload_crypto.loads(lp) for lp in loops]
        active = h.get(SessionField.ACTIVE_RUN) or ""
        shown = await self.client_ids([*runs, *(_loop_run(lp) for lp in history), active], tenant, part=part)
        return _view(session_id, h, runs, history, shown)

    async def _archived(
        self, session_id: str, tenant: str | None, h: dict[str, str] | None, part: keys.Partition
    ) -> dict[str, Any] | None:
        """The session from its archived runs, once Redis has no runs list for it (expired with its
        loops, or its hash gone too); its hash's creation time and active run while Redis has it.
        None without the archive or any archived run of it."""
        if self.archive is None:
            return None
        first, newest = await self.archive.session(tenant, session_id, limits.SESSION_RUNS_SHOWN)
        if not newest:
            return None
        shown = {r.key_id: r.client_id for r in newest if r.client_id != r.key_id}
        in_order = list(reversed(newest))  # submission order, as the session's runs list
        ended = sorted((r for r in in_order if r.loop), key=lambda r: (r.finished_at, r.created_at, r.key_id))
        history = [payload_crypto.loads(r.loop) for r in ended[-HISTORY_SHOWN:] if r.loop]
        h = h or {SessionField.CREATED_AT: str(first)}
        if active := h.get(SessionField.ACTIVE_RUN):  # a run still in Redis: its hash names it
            shown |= await self.client_ids([active], tenant, part=part)
        return _view(session_id, h, [r.key_id for r in in_order], history, shown)

    async def client_ids(
        self, run_ids: Sequence[str], tenant: str | None, *, part: keys.Partition | None = None
    ) -> dict[str, str]:
        """The ids the clients know those of ``run_ids`` by that are their tenants' keys (``tsc_…``):
        from their run hashes (one round trip per node; none without such ids), and from the
        archive for those no longer in Redis. ``part``: the runs' partition (a session's), else each
        is located."""
        scoped = sorted({r for r in run_ids if r.startswith(SCOPED_PREFIX)})
        if not scoped:
            return {}
        parts = self.parts
        where = [part] * len(scoped) if part is not None else await locate_many(parts, scoped)

        def hget(key: str) -> Any:
            return lambda pipe: pipe.hget(key, RunField.CLIENT_ID)

        found = [(r, p) for r, p in zip(scoped, where, strict=True) if p is not None]
        replies = await parts.pipelined([(p, hget(p.run(r))) for r, p in found])
        shown = {r: text(c[0]) for (r, _), c in zip(found, replies, strict=True) if c[0]}
        gone = [r for r in scoped if r not in shown]
        if gone and self.archive is not None:
            shown |= await self.archive.client_ids(gone, tenant)
        return shown


def _loop_run(loop: dict[str, Any]) -> str:
    return str(loop.get("runId") or "")


def _view(
    session_id: str, h: dict[str, str], runs: list[str], history: list[dict[str, Any]], shown: dict[str, str]
) -> dict[str, Any]:
    for lp in history:
        if (rid := _loop_run(lp)) in shown:
            lp["runId"] = shown[rid]
    active = h.get(SessionField.ACTIVE_RUN) or None
    return {
        "sessionId": session_id,
        "createdAt": int(h.get(SessionField.CREATED_AT) or 0),
        "activeRun": shown.get(active, active) if active else None,
        "runs": [shown.get(r, r) for r in runs],
        "history": history,
    }
