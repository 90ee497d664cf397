"""Costly pure work on large payloads, moved off a process's event loop onto one thread of its own.

A fork of a run with a large transcript costs tens of milliseconds of Python wherever it goes: in
the API, decoding the original, rebuilding its state at the forked seq, validating the input again
and sealing what the fork stores; in the worker, opening the run's input and origin, parsing them and
rebuilding the state it starts from. On the loop that serves every tenant, that is one turn the others
wait behind. On a thread the work still takes the interpreter's lock, but gives it back every switch
interval (``sys.getswitchinterval()``, 5 ms), so the loop keeps taking turns between. One thread a
process: one tenant's forks sent in parallel queue there instead of each taking the lock from the
loop in turn. Small payloads stay on the loop (``large``): a thread hop costs more than they do.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

__all__ = ["LARGE_BYTES", "large", "off_loop"]

P = ParamSpec("P")
T = TypeVar("T")

LARGE_BYTES = 64_000  # payloads from this size on are parsed off the loop (about a millisecond of CPU)

_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="off-loop")


def large(*payloads: bytes | str | None) -> bool:
    """Whether ``payloads`` together are worth the thread hop."""
    return sum(len(p) for p in payloads if p) >= LARGE_BYTES


async def off_loop(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """``fn(*args, **kwargs)`` on the thread, in a copy of the caller's context (as
    ``asyncio.to_thread``); its exception is the caller's."""
    call = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)
    return await asyncio.get_running_loop().run_in_executor(_pool, call)
