"""What the observer (metrics) and the traces hear of a run's steps: the machine's transitions and
the events worth counting on their own. Reporting only: nothing here changes the run."""

from __future__ import annotations

from agentmill_client.models import EventKind
from worker.machine import Emit
from worker.telemetry import tracing
from worker.telemetry.observer import Observer

__all__ = ["emitted", "transition"]


def transition(obs: Observer, src: str, since_ms: int, dst: str, cause: str, now_ms: int) -> None:
    """A step from ``src`` (entered at ``since_ms``) to ``dst`` on an event named ``cause``."""
    obs.transition(src, dst, cause)
    if dst != src and since_ms:  # time in the node just left, parked time included
        obs.state_time(src, max(0, now_ms - since_ms) / 1000.0)
        tracing.waited(src, since_ms, now_ms, cause)  # a wait span, when traces are on


def emitted(obs: Observer, c: Emit, *, resumed: bool, agent: str = "") -> None:
    """An event the step publishes; ``resumed``: the step took over a checkpoint (its tool results
    then come from their records); ``agent``: the run's profile. A compaction that removed
    messages rewrote the transcript from the first of them on: the prompt cache a provider holds
    for the run's prefix stops there."""
    status = c.payload.get("status") if c.kind == EventKind.STATUS else None
    if status == "retrying":
        obs.model_retry(str(c.payload.get("reason", "unknown")))
        tracing.retried(c.payload)  # an event on the attempt's span, when traces are on
    elif status == "model_fallback":
        p = c.payload
        obs.model_fallback(agent, str(p.get("from")), str(p.get("to")), str(p.get("reason")))
    elif c.kind == EventKind.COMPACTION:
        obs.compaction(str(c.payload.get("reason", "threshold")))
        obs.compaction_removed(
            messages=int(c.payload.get("removed", 0)), tokens=int(c.payload.get("removedTokens", 0))
        )
        if int(c.payload.get("removed", 0)) > 0:
            obs.cache_breaking_compaction(agent)
    elif resumed and c.kind == EventKind.TOOL_RESULT:
        obs.tool_served_from_record(str(c.payload.get("name", "")))
