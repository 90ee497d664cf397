"""One step's fenced write (``RunStore.commit``, worker/ports.py) and its parts: the events, claims and
records of its outbox, a budget settlement, and with the run's ending its usage tally and session update."""

from __future__ import annotations

from dataclasses import dataclass, field

from agentmill_client.models import Usage
from shared.construct import with_written_init

__all__ = [
    "CommitStep",
    "Entry",
    "JobEnd",
    "Outbox",
    "SessionUpdate",
    "Settlement",
    "TranscriptWrite",
    "UsageTally",
]


@with_written_init
@dataclass(frozen=True, slots=True)
class TranscriptWrite:
    """The transcript kept apart from the checkpoints (keys.Partition.transcript): its messages' JSON
    comma-joined, ``data`` appended to it (``append``: a leading comma unless the first) or set whole."""

    append: bool
    data: bytes


@with_written_init
@dataclass(frozen=True, slots=True)
class Settlement:
    """A model call's budget hold settled by the run's next commit (budget.lua, in commit.lua) rather
    than by a round trip of its own: possible when the tenant's budget shares the run's slot."""

    keys: list[str]  # the day's budget hash, its holds zset
    member: str  # the hold
    tokens: int
    nano_usd: int
    ttl_ms: int


@dataclass(slots=True)
class JobEnd:
    """arq's finish of the run's job (its keys gone, its result record kept ``keep_ms``), written by
    the run's ending commit instead of a round trip of its own after it (``JobFinisher``). ``result``:
    what the job returns with it; ``landed``: set once the commit is acknowledged (the worker then
    finishes the job no more, unless the job ends otherwise)."""

    job_id: str
    result: str
    record: bytes  # b"": none kept
    keep_ms: int
    landed: bool = False


# An event on its way to the stream: kind, ts, payload JSON. The events of one append (a commit, a
# publish) share their ts, the time they are published (Commits._stamped): stores send it once.
Entry = tuple[str, int, bytes]


@dataclass(slots=True)
class Outbox:
    """What one commit writes besides the checkpoint."""

    events: list[Entry] = field(default_factory=list)
    claims: list[str] = field(default_factory=list)
    records: list[tuple[str, bytes]] = field(default_factory=list)
    settle: Settlement | None = None  # a model call's budget settlement, written with this step

    def __bool__(self) -> bool:
        return bool(self.events or self.claims or self.records)


@with_written_init
@dataclass(frozen=True, slots=True)
class UsageTally:
    """Written with a run's terminal commit: its usage added to its tenant's usage of the UTC day
    (keys.Partition.usage_day, fields shared.fields.usage_field), which GET /v1/usage reads."""

    tenant: str
    day: str  # YYYY-MM-DD
    increments: list[tuple[str, int]]  # field, amount
    ttl_s: int


@with_written_init
@dataclass(frozen=True, slots=True)
class SessionUpdate:
    """Written with a run's terminal commit: its run loop (a completed run's; b"": none) joins the
    session's history, its tool results (session call id, ToolResult JSON) the session's results,
    and its calls (worker.core.context.PastCall JSON, in order) the session's calls."""

    session_id: str
    loop: bytes = b""
    tool_results: list[tuple[str, bytes]] = field(default_factory=list)
    calls: list[bytes] = field(default_factory=list)


@with_written_init
@dataclass(frozen=True, slots=True)
class CommitStep:
    """One step's fenced write (``RunStore.commit``): its events, claims and records (``outbox``)
    and, each when it changed, what else of the run the step wrote."""

    outbox: Outbox
    checkpoint: bytes | None = None  # the step's checkpoint; None: unchanged
    status: str = ""  # the run's new status; '': still running
    aux: bytes = b""  # the result JSON when terminal, the approvals (or pending client calls) when parked
    session: SessionUpdate | None = None  # with a terminal status of a run in a session
    approval_timeout_ms: int | None = None
    run_deadline_ms: int | None = None  # maxRunDurationMs from the start: bounds a wait too
    iterations: int | None = None
    error_code: str = ""  # the ending's error code (a field, for listings)
    children: bytes | None = None  # the current round's child runs (JSON [{toolCallId, runId}])
    usage: Usage | None = None  # the run's usage so far
    tally: UsageTally | None = None  # with a terminal status: the tenant's usage of the day
    config: bytes | None = None  # the run's configuration, stored apart from checkpoints (RunField.CONFIG)
    transcript: TranscriptWrite | None = None  # the transcript, stored apart from them
    job_end: JobEnd | None = None  # with a terminal status: arq's finish of the run's job
