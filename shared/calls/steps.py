"""Calls of a run's worker on its hot path: taking the run, committing a step, publishing a model's
deltas, its heartbeat, the tool cache's write, and a provider batch's answer to a model call."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from shared.calls.base import ScriptCall
from shared.keys import Partition

__all__ = [
    "Acquire",
    "AcquireVerdict",
    "AppendVerdict",
    "Beat",
    "BeatVerdict",
    "Commit",
    "ModelReply",
    "ModelReplyVerdict",
    "Publish",
    "ToolCachePut",
]


class AcquireVerdict(StrEnum):
    OK = "ok"  # then epoch, lastSeq, ckpt, input, abort, approvals, records, restarts, …
    MISSING = "missing"
    TERMINAL = "terminal"  # (its status second)
    SUPERSEDED = "superseded"  # another dispatch's job (the run's gen second)
    NO_LEASE = "no_lease"  # the taking worker's lease is gone
    BUSY = "busy"  # a live worker holds it (its lease id second)
    EXHAUSTED = "exhausted"  # its crash budget spent: it ended failed (the crashes second)


@dataclass(frozen=True, slots=True)
class Acquire(ScriptCall):
    """acquire.lua: a worker takes a run for a job arq started (acquire_run.lua; claim_jobs.lua
    takes the runs of the jobs a worker claims itself)."""

    SCRIPT = "acquire"
    KEY_NAMES = ("run", "stream", "tools")
    VERDICT = AcquireVerdict

    run_id: str
    gen: int
    lease_id: str  # the taking worker's

    def keys(self, part: Partition) -> list[str]:
        return part.run_keys(self.run_id)


class AppendVerdict(StrEnum):
    """An append's answer (commit.lua, publish.lua)."""

    OK = "ok"  # the stream's last seq second
    MISSING = "missing"  # no run (deleted)
    FENCED = "fenced"  # another epoch, or another (or lapsed) lease: the run's epoch second
    SEQ_CONFLICT = "seq_conflict"  # the stream does not end where this append begins (its last seq second)


@dataclass(frozen=True, slots=True)
class Commit(ScriptCall):
    """commit.lua: one step's fenced write. After the scalars, the counts of the variable sections,
    then ``sections``: the events (kind, ts, payload each), the tool claims (call id, attempt number:
    pending), the tool records (call id, JSON), the session's tool results (session call id, JSON),
    the session's calls (JSON each), the day's usage terms (field, increment). ``n_events`` is the
    last scalar, just before the events (append_refused reads the events after their count).

    KEYS: the run's, the worker's lease; with a session update the session's six; with a usage
    tally the tenant's usage hash of the day; with a settlement the budget's hash and holds zset
    (those two and the usage hash found from the end of KEYS). ``'' ``/None: unchanged or none."""

    SCRIPT = "commit"
    KEY_NAMES = ("run", "stream", "tools", "lease", "session", "session_pending", "session_runs",
                 "session_loops", "session_results", "session_calls")  # fmt: skip
    VERDICT = AppendVerdict

    epoch: int
    first_seq: int
    lease_id: str  # the committing worker's
    run_id: str
    status: str = ""  # the run's new status ('' = still running)
    aux: bytes | str = b""  # the result JSON when terminal; approvals, client calls, model wait when parked
    ckpt: bytes | str = b""  # the checkpoint ('' = unchanged)
    session_id: str = ""  # with a terminal status of a run in a session
    loop: bytes | str = b""  # its run loop JSON ('' = none)
    approval_timeout_ms: int | None = None
    run_deadline_ms: int | None = None  # maxRunDurationMs from the start: bounds a wait too
    iterations: int | None = None  # a field, so scripts that end a run report it
    error_code: str = ""  # the ending's error code (a field, for listings)
    children: bytes | str = b""  # the current round's child runs (JSON [{toolCallId, runId}])
    usage_in: int | None = None  # the run's usage so far, when it changed (None: unchanged)
    usage_out: int | None = None
    usage_estimated: str = ""  # '1' | '0'
    usage_cost: str = ""  # USD ('' = none)
    usage_cache_read: int | None = None
    usage_cache_write: int | None = None
    config: bytes | str = b""  # the run's configuration JSON (checkpoints are written without it)
    transcript_mode: str = ""  # 'a' append, 's' set, '' unchanged
    transcript: bytes | str = b""
    usage_ttl: int | None = None  # the usage hash of the day's ttl s (with a terminal status)
    settle_member: str = ""  # a budget hold settled with the step (budget.lua; '' = none)
    settle_tokens: int | None = None
    settle_nano_usd: int | None = None
    settle_ttl_ms: int | None = None
    n_claims: int = 0
    n_records: int = 0
    n_results: int = 0
    n_calls: int = 0
    n_usage: int = 0
    n_events: int = 0
    sections: tuple[bytes | str | int, ...] = ()

    def keys(self, part: Partition) -> list[str]:
        """The run's keys and the worker's lease (a session's, the usage day's, the budget's keys
        follow, from the step: worker.adapters.redis_store)."""
        return [*part.run_keys(self.run_id), part.worker_lease(self.lease_id)]


@dataclass(frozen=True, slots=True)
class Publish(ScriptCall):
    """publish.lua: events alone (a model's deltas), behind commit.lua's gate."""

    SCRIPT = "publish"
    KEY_NAMES = ("run", "stream", "lease")
    VERDICT = AppendVerdict

    epoch: int
    first_seq: int
    lease_id: str
    n_events: int
    events: tuple[bytes | str | int, ...]  # kind, ts, payload per event

    def keys(self, part: Partition, run_id: str = "") -> list[str]:
        return [*part.run_keys(run_id)[:2], part.worker_lease(self.lease_id)]


class BeatVerdict(StrEnum):
    OK = "ok"  # then the live workers, then runId, epoch, abort reason per abort asked
    LOST = "lost"  # the lease had expired: not renewed


@dataclass(frozen=True, slots=True)
class Beat(ScriptCall):
    """beat.lua: a worker's heartbeat on one partition (its lease renewed, its abort inbox read)."""

    SCRIPT = "beat"
    KEY_NAMES = ("inbox", "lease")
    VERDICT = BeatVerdict

    lease_id: str
    lease_ms: int
    max_messages: int
    register: str = ""  # '1': a new lease id

    def keys(self, part: Partition) -> list[str]:
        return [part.worker_inbox(self.lease_id), part.worker_lease(self.lease_id)]


@dataclass(frozen=True, slots=True)
class ToolCachePut(ScriptCall):
    """tool_cache_put.lua: a tool result cached by a run that still exists (answers 1, else 0)."""

    SCRIPT = "tool_cache_put"
    KEY_NAMES = ("run", "cache", "cached")  # the run, the cache key, the run's cached keys

    result: bytes | str  # JSON
    ttl_s: int

    def keys(self, part: Partition, run_id: str = "", cache_key: str = "") -> list[str]:
        return [part.run(run_id), cache_key, part.run_cached(run_id)]


class ModelReplyVerdict(StrEnum):
    RESUMED = "resumed"  # recorded, and the run waiting for it went back on the queue
    RECORDED = "recorded"
    DUPLICATE = "duplicate"
    LATE = "late"  # a call the run is past, or sent to the standard lane: discarded
    FINISHED = "finished"
    UNKNOWN_RUN = "unknown_run"


@dataclass(frozen=True, slots=True)
class ModelReply(ScriptCall):
    """model_reply.lua: a provider batch's answer to a run's model call, kept with the run once."""

    SCRIPT = "model_reply"
    KEY_NAMES = ("run",)
    VERDICT = ModelReplyVerdict

    run_id: str
    index: int  # the call's
    answer: bytes | str  # JSON

    def keys(self, part: Partition) -> list[str]:
        return [part.run(self.run_id)]
