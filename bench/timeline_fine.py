"""``python -m bench.latency_timeline --fine``: stamps inside a run (at the start and end of the calls
in FINE) and the count of the event loop's turns from a run's task start to its commit sent (a
``turns N`` stamp). In the worker process that bench starts."""

from __future__ import annotations

import asyncio
import functools
import importlib
import inspect
from collections.abc import Callable
from typing import Any

__all__ = ["FINE", "count_turns", "install", "turns_taken"]

# Stamps at the start (``<``) and end (``>``) of these calls on a run's path.
FINE = [
    ("worker.adapters.redis_store", "RedisRunStore", "acquire"),
    ("worker.runner.opening", None, "agent_of"),
    ("worker.runner.opening", None, "start"),
    ("worker.runner.commits", "Commits", "step"),
    ("worker.adapters.redis_store", "RedisRunStore", "commit"),
    ("worker.adapters.redis_store", "RedisRunStore", "_commit_call"),
    ("worker.adapters.batcher", "ScriptBatcher", "_send"),
    ("worker.runner.model_call", None, "_call_model"),
    ("worker.process.arq_worker", "ResilientWorker", "_start_claims"),
    ("worker.process.deps", "WorkerDeps", "ports"),
    ("worker.runner.driver", "RunDriver", "__init__"),
    ("worker.runner.driver", "RunDriver", "_run"),
    ("worker.machine", None, "decide"),
    ("worker.runner.ending", None, "session_update"),
    ("worker.runner.ending", None, "usage_tally"),
    ("worker.runner.ending", None, "encode"),
    ("worker.runner.commits", "Commits", "_dump"),
    ("shared.route", "Sending", "replies"),
]


def install(stamp: Callable[[str], None]) -> None:
    """Each call of FINE wrapped in its two stamps."""
    for mod_name, cls_name, name in FINE:
        mod = importlib.import_module(mod_name)
        owner = getattr(mod, cls_name) if cls_name else mod
        f = getattr(owner, name)
        label = name

        def wrap(f: Any, label: str) -> Any:
            if inspect.iscoroutinefunction(f):

                @functools.wraps(f)
                async def aw(*a: Any, **k: Any) -> Any:
                    stamp(label + " <")
                    try:
                        return await f(*a, **k)
                    finally:
                        stamp(label + " >")

                return aw

            @functools.wraps(f)
            def w(*a: Any, **k: Any) -> Any:
                stamp(label + " <")
                try:
                    return f(*a, **k)
                finally:
                    stamp(label + " >")

            return w

        setattr(owner, name, wrap(f, label))


TURNS: list[Any] = [0, False]  # the loop's turns from a run's task start to its commit, counting


def count_turns() -> None:
    """A callback that schedules itself each turn of the loop, counting, until the commit is sent
    (it keeps the loop from sleeping meanwhile: a count, not a time)."""
    loop = asyncio.get_running_loop()
    TURNS[:] = [0, True]

    def tick() -> None:
        if TURNS[1]:
            TURNS[0] += 1
            loop.call_soon(tick)

    loop.call_soon(tick)


def turns_taken() -> int | None:
    """The turns counted since ``count_turns``, once (None: not counting)."""
    if not TURNS[1]:
        return None
    TURNS[1] = False
    return int(TURNS[0])
