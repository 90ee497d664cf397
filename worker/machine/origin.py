"""The state a retry's or fork's origin (shared.origin) names, pure: the worker starting the new run
turns it into the ``Restored`` event; the producer forking a run computes it once, at the fork, and
stores that state alone (producer/restore.py), so that a fork carries no chain of origins.

An origin is a checkpoint (a retry's, or a fork's as stored now), or, as forks stored theirs before,
the events up to the fork's seq with the forked run's last checkpoint and its own origin (``parent``):
the events of a run that was itself restored begin where that origin put it (the machine's first
step of it), so that form is rebuilt recursively."""

from __future__ import annotations

from agentmill_client.models import Message
from shared.origin import Origin
from worker.machine.events import Restored
from worker.machine.restore import rebuild
from worker.machine.state import RunState, initial_state
from worker.machine.table import decide

__all__ = ["origin_state"]


def origin_state(o: Origin, run_id: str, input_messages: list[Message], now_ms: int) -> RunState | None:
    """The state ``o`` names (None: no checkpoint and no events, a run that never started);
    ``input_messages``: the run's, which a rebuilt transcript begins with."""
    base = RunState.model_validate(o.checkpoint["state"]) if o.checkpoint else None
    if o.events is None:
        return base
    start = None
    if o.parent is not None and base is not None and base.config is not None:
        p = Origin.from_dict(o.parent)
        before = origin_state(p, run_id, input_messages, now_ms)
        append = [Message.model_validate(m) for m in p.append]
        first = Restored(now_ms, base.config, before, input_messages, append)
        start, _ = decide(initial_state(run_id), first)
    return rebuild(run_id, base, input_messages, o.events, start=start)
