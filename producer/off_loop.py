"""A request's costly pure work, moved off the API's event loop onto one thread of its own.

A fork of a run with a large transcript decodes its events, input and checkpoint, rebuilds the
state at the forked seq, validates the input again and seals the state it stores: tens of
milliseconds of Python for a transcript near its bound. On the loop that serves every tenant, that
is one turn another tenant's requests wait behind. On a thread the work still takes the
interpreter's lock, but gives it back every switch interval (``sys.getswitchinterval()``, 5 ms), so
the loop keeps taking turns between. One thread for all of them: one tenant's forks sent in
parallel queue there instead of each taking the lock from the loop in turn.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

__all__ = ["off_loop"]

P = ParamSpec("P")
T = TypeVar("T")

_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="off-loop")


async def off_loop(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """``fn(*args, **kwargs)`` on the thread, in a copy of the caller's context (as
    ``asyncio.to_thread``); its exception is the caller's."""
    call = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)
    return await asyncio.get_running_loop().run_in_executor(_pool, call)
