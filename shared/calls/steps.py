"""Calls of a run's worker on its hot path: taking the run, committing a step, publishing a model's
deltas, its heartbeat, the tool cache's write, and a provider batch's answer to a model call."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from shared.calls.base import TAIL, ScriptCall
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
    """commit.lua: one step's fenced write. After the scalars every commit may need, the counts of
    its sections, then ``sections``: the events (kind, payload each: ``ts`` is the time of all of
    them, the time they are published, sent once), the tool claims (call id,
    attempt number: pending), the tool records (call id, JSON). ``n_events`` is the last scalar, just
    before the events (append_refused reads the events after their count). Then the tail (base.TAIL),
    sent up to its last field a commit needs: the iterations and usage when they changed, the run's
    children and configuration, a staged transcript, a status's companions (its result, approvals
    or waits, error code, deadlines), the session's, the budget settlement, arq's finish, and
    ``tail_sections``: the session's tool results (session call id, JSON), the session's calls
    (JSON each), the day's usage terms (field, increment). A step's commit after its tools ran
    sends no tail; the one after its model call its iterations and usage.

    KEYS: the run's (its stream, tools hash and the worker's lease the script builds from ``run_id``
    and ``lease_id``, in the run's slot); with a session update the session's six; with a usage
    tally the tenant's usage hash of the day; with a settlement the budget's hash and holds zset
    (those two and the usage hash found from the end of KEYS). ``'' ``/None: unchanged or none."""

    SCRIPT = "commit"
    KEY_NAMES = ("run", "session", "session_pending", "session_runs", "session_loops", "session_results",
                 "session_calls")  # fmt: skip
    VERDICT = AppendVerdict

    epoch: int
    first_seq: int
    lease_id: str  # the committing worker's
    run_id: str
    status: str = ""  # the run's new status ('' = still running)
    ckpt: bytes | str = b""  # the checkpoint ('' = unchanged)
    transcript_mode: str = ""  # 'a' append, 's' set, '' unchanged
    transcript: bytes | str = b""
    n_claims: int = 0
    n_records: int = 0
    ts: int | None = None  # the events' (unix ms)
    n_events: int = 0
    sections: tuple[bytes | str | int, ...] = ()
    # the tail: sent up to its last field that is not its default, so the fields a step's usual
    # commits need come first (a step's commit after its model call sends the first four or five,
    # the one after its tools none)
    iterations: int | None = field(default=None, metadata=TAIL)  # a field, so scripts that end a run
    # report it (None: unchanged)
    usage_in: int | None = field(default=None, metadata=TAIL)  # the run's usage so far, when it
    # changed (None: unchanged)
    usage_out: int | None = field(default=None, metadata=TAIL)
    usage_estimated: str = field(default="", metadata=TAIL)  # '1' | '0'
    usage_cost: str = field(default="", metadata=TAIL)  # USD ('' = none)
    usage_cache_read: int | None = field(default=None, metadata=TAIL)  # None: 0 or unchanged
    usage_cache_write: int | None = field(default=None, metadata=TAIL)
    children: bytes | str = field(
        default=b"", metadata=TAIL
    )  # the current round's child runs (JSON [{toolCallId, runId}])
    config: bytes | str = field(
        default=b"", metadata=TAIL
    )  # the run's configuration JSON (checkpoints are written without it)
    transcript_staged: str = field(
        default="", metadata=TAIL
    )  # with 's': the key a large transcript was staged in (Partition.staged)
    aux: bytes | str = field(
        default=b"", metadata=TAIL
    )  # the result JSON when terminal; approvals, client calls, model wait when parked
    session_id: str = field(default="", metadata=TAIL)  # with a terminal status of a run in a session
    loop: bytes | str = field(default=b"", metadata=TAIL)  # its run loop JSON ('' = none)
    approval_timeout_ms: int | None = field(default=None, metadata=TAIL)
    run_deadline_ms: int | None = field(
        default=None, metadata=TAIL
    )  # maxRunDurationMs from the start: bounds a wait too
    error_code: str = field(default="", metadata=TAIL)  # the ending's error code (a field, for listings)
    usage_ttl: int | None = field(
        default=None, metadata=TAIL
    )  # the usage hash of the day's ttl s (with a terminal status)
    settle_member: str = field(
        default="", metadata=TAIL
    )  # a budget hold settled with the step (budget.lua; '' = none)
    settle_tokens: int | None = field(default=None, metadata=TAIL)
    settle_nano_usd: int | None = field(default=None, metadata=TAIL)
    settle_ttl_ms: int | None = field(default=None, metadata=TAIL)
    job: str = field(default="", metadata=TAIL)  # with a terminal status: arq's finish of this job id
    job_result: bytes | str = field(default=b"", metadata=TAIL)  # its result record ('' = none kept)
    job_result_ms: int | None = field(default=None, metadata=TAIL)  # how long the record is kept
    n_results: int = field(default=0, metadata=TAIL)
    n_calls: int = field(default=0, metadata=TAIL)
    n_usage: int = field(default=0, metadata=TAIL)
    tail_sections: tuple[bytes | str | int, ...] = field(default=(), metadata=TAIL)

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
    ts: int  # the events' (unix ms)
    n_events: int
    events: tuple[bytes | str | int, ...]  # kind, payload per event

    def keys(self, part: Partition, run_id: str = "") -> list[str]:
        return [*part.run_keys(run_id)[:2], part.worker_lease(self.lease_id)]


class BeatVerdict(StrEnum):
    OK = "ok"  # then the live workers, then runId, epoch, abort reason per abort asked
    LOST = "lost"  # the lease had expired: not renewed


@dataclass(frozen=True, slots=True)
class Beat(ScriptCall):
    """beat.lua: a worker's heartbeat on one partition (its lease renewed, its abort inbox read)."""

    SCRIPT = "beat"
    KEY_NAMES = ("inbox", "lease", "answer_workers")
    VERDICT = BeatVerdict

    lease_id: str
    lease_ms: int
    max_messages: int
    register: str = ""  # '1': a new lease id

    def keys(self, part: Partition) -> list[str]:
        return [part.worker_inbox(self.lease_id), part.worker_lease(self.lease_id), part.answer_workers]


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
