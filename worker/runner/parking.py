"""How a run parks on no worker, by what the machine asked: awaiting a human's decision, a client's
tool results, its child runs or a provider batch's answer (the economy lane). Each is one commit of
the run's status with what the run hash keeps while it waits; the store (or the answer's script)
puts the run back on the queue."""

from __future__ import annotations

from dataclasses import dataclass

import orjson

from agentmill_client.models import RunResult, RunStatus
from shared.construct import with_written_init
from worker.machine import AwaitChildren, AwaitClient, AwaitHuman, AwaitModel, RunState

__all__ = ["Park", "Parking", "ending_error", "parking"]

Park = AwaitHuman | AwaitClient | AwaitChildren | AwaitModel


@with_written_init
@dataclass(frozen=True, slots=True)
class Parking:
    status: str
    aux: bytes  # what the run hash keeps while it waits (approvals, the client calls, the children)
    approval_timeout_ms: int | None = None
    run_deadline_ms: int | None = None  # maxRunDurationMs from its start: Redis keeps it while parked


def parking(c: Park, state: RunState, run_deadline_ms: int | None) -> Parking:
    if isinstance(c, AwaitHuman):
        return Parking(RunStatus.AWAITING_HUMAN.value, orjson.dumps(c.record()), state.cfg.approval_timeout_ms,
                       run_deadline_ms)  # fmt: skip
    if isinstance(c, AwaitClient):  # back on the queue once every call has a result or is past its deadline
        return Parking(RunStatus.AWAITING_TOOLS.value, orjson.dumps(c.record()))
    if isinstance(c, AwaitModel):  # back on the queue when its batch's answer is delivered, or at switchAt
        return Parking(RunStatus.AWAITING_MODEL.value, orjson.dumps(c.record()))
    # back on the queue when the last child's ending is delivered (at once, if they all ended already)
    return Parking(RunStatus.AWAITING_CHILDREN.value, orjson.dumps(c.record()), None, run_deadline_ms)


def ending_error(result: RunResult) -> str:
    """The code a listing shows for a run's ending: a failed or aborted run's lastError (a completed
    run's lastError is a retried error it got past)."""
    if result.last_error is None or result.status == RunStatus.COMPLETED:
        return ""
    return result.last_error.code
