"""Calls that take runs out of a partition: the runs an archiver has written to the archive
(shared/archive/archiver.py), a run deleted with everything naming it (producer/deletion.py)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from shared.calls.base import ScriptCall
from shared.keys import Partition

__all__ = ["ArchiveDone", "DeleteRun", "DeleteRunVerdict"]


@dataclass(frozen=True, slots=True)
class ArchiveDone(ScriptCall):
    """archive_done.lua: runs the archive holds now, out of the partition's indexes and marked
    archived, their hash kept ``live_retention_s`` without what only a live run needs. ``runs``: per
    run its id, its number of listing terms, then those terms (shared.meta_terms). Answers how many
    were still in the archive index, then the runs deleted meanwhile."""

    SCRIPT = "archive_done"
    KEY_NAMES = ()  # the run keys and the archive index are the context's

    live_retention_s: int
    runs: tuple[str | int, ...]

    def keys(self, part: Partition) -> list[str]:
        return []


class DeleteRunVerdict(StrEnum):
    DELETED = "deleted"  # (its status, its sessionId after)
    UNKNOWN = "unknown"  # no such run of the tenant
    GONE = "gone"  # deleted before (its tombstone after)
    MOVED = "moved"  # not in the session the caller read (its sessionId after): read again
    FINISHING = "finishing"  # ended, its job's bookkeeping (arq's result record) not yet written: again


@dataclass(frozen=True, slots=True)
class DeleteRun(ScriptCall):
    """delete_run.lua: one run out of its partition, all at once (its hash, stream, records, job,
    indexes, batch count, session entries), leaving its tombstone. ``terms``: its metadata's listing
    terms (shared.meta_terms)."""

    SCRIPT = "delete_run"
    # the session's keys (Partition.session_keys) only when the run has a session
    KEY_NAMES = ("run", "stream", "tools", "webhooks_due", "tree", "session", "session_pending", "session_runs",
                 "session_loops", "session_results", "session_calls")  # fmt: skip
    VERDICT = DeleteRunVerdict

    run_id: str
    tenant: str  # '' = any
    tombstone: bytes | str  # its JSON
    tombstone_ttl_s: int
    session_id: str  # as the caller read it ('' = none)
    wait_job: int  # 1: answer FINISHING while an ended run's job is still being finished
    n_terms: int
    terms: tuple[str, ...]

    def keys(self, part: Partition) -> list[str]:
        own = [*part.run_keys(self.run_id), part.webhooks_due, part.tree(self.run_id)]
        return own + part.session_keys(self.session_id) if self.session_id else own
