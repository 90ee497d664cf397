"""What ``RunStore.acquire`` (worker/ports.py) answers: the run as the worker takes it over at its new
epoch, or the verdict that it may not."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agentmill_client import limits
from shared.construct import with_written_init
from shared.tool_records import ToolRecord

if TYPE_CHECKING:
    from shared.calls.steps import AcquireVerdict

__all__ = ["Acquired", "NotAcquired"]


@with_written_init
@dataclass(frozen=True, slots=True)
class Acquired:
    epoch: int
    last_seq: int
    checkpoint: bytes | None
    input: bytes
    abort_reason: str  # the run's abort field: its reason, or with who aborts (shared.actors.abort_of)
    approvals: dict[str, Any]
    tool_records: dict[str, ToolRecord]
    restarts: int
    origin: bytes | None = None  # a retry's or fork's initial checkpoint payload, until its first commit
    tenant: str = ""
    ancestry: bytes = b""  # a child run's (config.Lineage JSON: its ancestors); b"" for a root run
    trace: str = ""  # the submitter's trace context as stored (RunField.TRACE), '' = none
    config: bytes | None = None  # the run's configuration when its checkpoints leave it out (RunField.CONFIG)
    transcript: bytes | None = None  # its transcript when they leave that out (keys.Partition.transcript)
    priority: int = (
        limits.DEFAULT_PRIORITY
    )  # as capped at submission (RunField.PRIORITY): its place at a provider's limiter
    unreadable: str = ""  # why its stored data does not open (a data key no longer listed); '' = it does
    # the seq of its opening event (``running``) when the acquisition wrote it (acquire_run.lua: a
    # new run, once), 0 = not written there: the machine's own opening event is written instead
    opened: int = 0
    # the answer's first event when the script that resumed the run wrote it (RunField.ANSWERED:
    # '<seq>:<kind>:<toolCallId>'), '' = none: the machine's own is left out while the checkpoint is older
    answered: str = ""


@with_written_init
@dataclass(frozen=True, slots=True)
class NotAcquired:
    verdict: AcquireVerdict  # never OK
    detail: str = ""
