"""Failpoints for chaos tests: ``AGENTMILL_FAILPOINTS="after_tool_effect:0.2,after_delta_publish:0.1"``.

At a named point, with the given probability, the worker process kills itself with SIGKILL, so a
test can crash it exactly after a tool's side effect but before its result is recorded, or after
events were published but before the checkpoint. Unset (the default), every check is a dict lookup.
"""

from __future__ import annotations

import os
import random
import signal

__all__ = ["hit"]


_points: dict[str, float] = {}
for _item in filter(None, os.environ.get("AGENTMILL_FAILPOINTS", "").split(",")):
    _name, _, _p = _item.partition(":")
    _points[_name.strip()] = float(_p or 1.0)


def hit(name: str) -> None:
    p = _points.get(name)
    if p is not None and random.random() < p:
        os.kill(os.getpid(), signal.SIGKILL)
