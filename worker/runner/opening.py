"""The first events of a job: ``Started`` (or ``StartRejected``) for a new run, ``Resumed`` for a run
taken over from its checkpoint, and the answers that arrived while it was parked."""

from __future__ import annotations

import orjson

from agentmill_client.models import RunInput
from shared.settings import Settings
from shared.tool_records import ToolRecord
from worker.config import resolve_config
from worker.machine import (
    ApprovalsDecided,
    ClientResultsReceived,
    Event,
    Phase,
    Resumed,
    RunState,
    Started,
    StartRejected,
)
from worker.ports import Acquired, Host, ModelPort, ToolPort

__all__ = ["answers", "restore", "resumed", "start"]


def restore(checkpoint: bytes) -> tuple[RunState, int]:
    """The checkpointed state and the seq of the last event committed with it."""
    ck = orjson.loads(checkpoint)
    return RunState.model_validate(ck["state"]), int(ck["seq"])


def resumed(records: dict[str, ToolRecord], now_ms: int) -> Resumed:
    """The take-over, with the tool results the store holds (the machine serves the ones it needs)."""
    return Resumed(now_ms, {i: res for i, r in records.items() if (res := r.recorded) is not None})


async def start(host: Host, tools: ToolPort, models: ModelPort, run_input: RunInput, now_ms: int) -> Event:
    """The run's configuration from its profile and input; a bad profile or policy rejects the start."""
    s: Settings = host.settings
    try:
        profile = host.profile(run_input.agent)
        specs = await tools.specs(profile)
        models.provider(profile)
        cfg = resolve_config(
            profile, run_input, specs, has_session=run_input.session_id is not None,
            duration_default_ms=s.run_duration_default_ms, duration_max_ms=s.run_duration_max_ms,
        )  # fmt: skip
    except Exception as exc:  # a bad profile or policy fails the run with a reason
        return StartRejected(now_ms, "configuration", f"agent {run_input.agent!r}: {exc}")
    return Started(now_ms, cfg, list(run_input.input_messages))


def answers(state: RunState, acq: Acquired, records: dict[str, ToolRecord], now_ms: int) -> list[Event]:
    """A parked run resumed: the humans' decisions, or the client's results (the store holds them,
    with timeout errors for calls past their deadline)."""
    if state.phase == Phase.AWAITING_HUMAN and acq.approvals:
        decided = {k: v for k, v in acq.approvals.items() if v.get("decision") != "pending"}
        if len(decided) == len(acq.approvals):
            return [
                ApprovalsDecided(
                    now_ms,
                    {k: v["decision"] == "approved" for k, v in decided.items()},
                    {k: str(v["reason"]) for k, v in decided.items() if v.get("reason")},
                )
            ]
    elif state.phase == Phase.AWAITING_TOOLS:
        results = {
            i: res for i in state.client_waiting if i in records and (res := records[i].recorded) is not None
        }
        return [ClientResultsReceived(now_ms, results)]
    return []
