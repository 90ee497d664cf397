"""One run's stored state in memory (worker/adapters/memory_store.py's ``MemoryRun``): what the run
hash, its event stream and its tool records hold in Redis."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from agentmill_client.models import RunInput, RunStatus, Usage

__all__ = ["MemoryRun"]


@dataclass
class MemoryRun:
    """One run's stored state: what the run hash, its event stream and its tool records hold."""

    run_id: str
    input: bytes
    status: str = RunStatus.QUEUED.value
    epoch: int = 0
    checkpoint: bytes | None = None
    config: bytes | None = None  # RunField.CONFIG: the configuration, when checkpoints leave it out
    transcript: bytes | None = None  # the transcript key's: its messages comma-joined, when they leave it out
    iterations: int = 0  # as the last commit reported it (the Redis run hash keeps the same field)
    result: bytes = b""
    aux: bytes = b""
    abort_reason: str = ""
    restarts: int = 0
    owner: str = ""  # the worker holding the run ('' when none does: queued, parked or ended)
    error_code: str = ""  # the ending's error code
    usage: Usage | None = None  # the run's usage as the last commit that changed it reported it
    # The workers whose lease is unexpired. None: leases not modelled, each worker's acquire takes
    # the run over (its previous owner is taken to be lost), and an owner's commits are never late.
    live: set[str] | None = None
    events: list[tuple[int, str, int, bytes]] = field(default_factory=list)  # seq, kind, ts, payload
    tools: dict[str, dict[str, Any]] = field(default_factory=dict)  # call id -> record, as JSON holds it
    approvals: dict[str, Any] = field(default_factory=dict)
    origin: bytes | None = None  # a retry's or fork's initial checkpoint payload (the run hash's origin)
    opened: int = 0  # the seq of its opening event, written by its first acquisition (RunField.OPENED)
    answered: str = ""  # the event an answer wrote ('<seq>:<kind>:<toolCallId>', RunField.ANSWERED)

    @classmethod
    def submitted(cls, run_id: str, run_input: RunInput) -> MemoryRun:
        return cls(run_id, run_input.model_dump_json(by_alias=True).encode())

    def kinds(self) -> list[str]:
        return [k for _, k, _, _ in self.events]

    def payloads(self, kind: str) -> list[dict[str, Any]]:
        return [orjson.loads(p) for _, k, _, p in self.events if k == kind]
