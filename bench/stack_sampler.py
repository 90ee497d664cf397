"""A thread sampling the main thread's Python stack while its event loop is busy in one turn: what
bench/stall_watch.py (in each worker of ``bench --stalls``) and bench/turns_probe.py keep of a long
turn. It imports nothing of the pool's: a process it watches loads no more modules for it."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from pathlib import Path

__all__ = ["main_stack", "sample_main_stack"]


def main_stack(skip: tuple[str, ...], depth: int) -> str:
    """The main thread's stack, innermost first: ``depth`` frames (``file:function``, joined by
    ' < ') outside the files ``skip`` starts with."""
    frame = sys._current_frames().get(threading.main_thread().ident or 0)
    names: list[str] = []
    while frame is not None and len(names) < depth:
        where = f"{Path(frame.f_code.co_filename).name}:{frame.f_code.co_name}"
        if not where.startswith(skip):
            names.append(where)
        frame = frame.f_back
    return " < ".join(names)


def sample_main_stack(
    every_s: float,
    busy: Callable[[], bool],
    keep: Callable[[str], None],
    stop: threading.Event,
    *,
    skip: tuple[str, ...],
    depth: int,
    name: str = "stack-sampler",
) -> threading.Thread:
    """A daemon thread, started: every ``every_s`` until ``stop`` is set, while ``busy()``, it hands
    ``keep`` the main thread's stack (``main_stack``)."""

    def run() -> None:
        while not stop.wait(every_s):
            if busy():
                keep(main_stack(skip, depth))

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    return thread
