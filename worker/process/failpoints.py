"""Failpoints for chaos tests: ``AGENTMILL_FAILPOINTS="after_tool_effect:0.2,after_delta_publish:0.1"``.

At a named point, with the given probability, the worker process kills itself with SIGKILL, so a
test can crash it exactly after a tool's side effect but before its result is recorded, or after
events were published but before the checkpoint. A few points are faults short of a crash, checked
with ``on``: ``drop_wake_signal`` (the worker ignores a wake signal it received, as if it were
lost: its poll has to find the job), ``beat_reply_late`` (a beat that Redis executed is answered
three leases late: the worker's deadline passes while Redis still holds its lease),
``claim_reply_lost`` (once: a claim ran, its reply never reached the worker, as when the connection
drops after the script and the client sends it again). The worker arms them from its settings
(``Settings.failpoints``) when it starts; unarmed (the default), every check is a dict lookup.
"""

from __future__ import annotations

import os
import random
import signal

__all__ = ["arm", "hit", "on", "once"]


_points: dict[str, float] = {}


def arm(spec: str) -> None:
    """Arm the points of ``spec`` (``name:probability,…``; no probability: 1), and only those."""
    points: dict[str, float] = {}
    for item in filter(None, spec.split(",")):
        name, _, p = item.partition(":")
        points[name.strip()] = float(p or 1.0)
    _points.clear()
    _points.update(points)


def hit(name: str) -> None:
    p = _points.get(name)
    if p is not None and random.random() < p:
        os.kill(os.getpid(), signal.SIGKILL)


def on(name: str) -> bool:
    """Whether the fault named ``name`` happens this time (its probability; never when unarmed)."""
    p = _points.get(name)
    return p is not None and random.random() < p


def once(name: str) -> bool:
    """``on``, and the point disarmed when it happens: a fault a test wants exactly once."""
    if on(name):
        del _points[name]
        return True
    return False
