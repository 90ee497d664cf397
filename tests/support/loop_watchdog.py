"""A watchdog of the test process's event loops: who held a loop still for more than a second.

An async test runs its in-process workers, APIs and fake servers in the test's own loop: a
synchronous call in the test (waiting on a process, a socket, ``time.sleep``) stops all of them,
and the test then fails far from the cause (a worker's stop past its timeout, a sampler that got
three samples). Every loop the test process creates through the event-loop policy (pytest-asyncio's,
``asyncio.run``'s) is a ``WatchedLoop``: it notes the time of each turn (a heartbeat callback every
100 ms keeps an idle loop turning). A thread checks four times a second; a running loop that has not
turned for longer than the threshold is a stall, and the thread samples the stack of the loop's
thread once a second while it lasts, with what the thread did meanwhile (Linux's schedstat: on a
CPU, waiting for one, or asleep in a call or for the GIL) and the loop's other tasks it held up,
so a stall says whether the test blocked the loop or the machine starved the process.

``AGENTMILL_LOOP_STALL_S`` sets the threshold (default 1 s; ``0`` turns the watchdog off). Each stall
is added to its test's report (printed when the test fails) and, with ``AGENTMILL_LOOP_STALL_LOG``
set to a directory, appended to a file per test process there. The cost is a callback every 100 ms
in each running loop and a thread that wakes four times a second: about 0.3 % of a core while a
loop idles, within the noise of a busy one.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time
import traceback
import weakref
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Stall", "Watchdog", "WatchedLoop", "install", "task_stacks", "threshold_s"]

BEAT_S = 0.1
MAX_SAMPLES = 8


def _schedstat(tid: int | None) -> tuple[float, float] | None:
    """Seconds a thread spent on a CPU and waiting for one, from /proc (None off Linux)."""
    if tid is None:
        return None
    try:
        with open(f"/proc/self/task/{tid}/schedstat") as f:
            on_cpu, waiting = f.read().split()[:2]
    except (OSError, ValueError):
        return None
    return int(on_cpu) / 1e9, int(waiting) / 1e9


def _tasks(loop: asyncio.AbstractEventLoop) -> str:
    """The loop's unfinished tasks by coroutine, most first (read from another thread while the loop's
    own is stuck: a best effort)."""
    try:
        names = Counter(
            getattr(t.get_coro(), "__qualname__", "?") for t in asyncio.all_tasks(loop) if not t.done()
        )
    except RuntimeError:  # the set changed while read
        return "(unknown)"
    return ", ".join(f"{n} x{c}" if c > 1 else n for n, c in names.most_common(8))


def task_stacks(tasks: set[asyncio.Task[Any]] | None = None) -> str:
    """What each unfinished task of the running loop (or ``tasks``) awaits, innermost last: for a
    test whose worker or server did not stop in time, where each of its tasks stands."""
    lines = []
    for task in sorted(tasks if tasks is not None else asyncio.all_tasks(), key=lambda t: t.get_name()):
        if task.done():
            continue
        chain: list[str] = []
        aw: Any = task.get_coro()
        for _ in range(64):
            frame = (
                getattr(aw, "cr_frame", None)
                or getattr(aw, "ag_frame", None)
                or getattr(aw, "gi_frame", None)
            )
            if frame is None:
                if aw is not None:
                    chain.append(repr(aw)[:160])
                break
            chain.append(f"{frame.f_code.co_qualname} ({frame.f_code.co_filename}:{frame.f_lineno})")
            aw = (
                getattr(aw, "cr_await", None)
                or getattr(aw, "ag_await", None)
                or getattr(aw, "gi_yieldfrom", None)
            )
        lines.append(f"{task.get_name()}: " + " -> ".join(chain))
    return "\n".join(lines)


class WatchedLoop(asyncio.SelectorEventLoop):
    """An event loop that notes when it last turned (``turned``, monotonic) and which thread runs it."""

    def __init__(self) -> None:
        super().__init__()
        self.turned = time.monotonic()
        self.native_tid: int | None = None
        self.beating = False

    def _beat(self) -> None:
        self.turned = time.monotonic()
        self.call_later(BEAT_S, self._beat)

    def run_forever(self) -> None:
        self.turned = time.monotonic()
        self.native_tid = threading.get_native_id()
        if not self.beating:
            self.beating = True
            self.call_soon(self._beat)
        super().run_forever()


@dataclass
class Stall:
    """A loop that did not turn for ``seconds``, in ``where`` (a test's node id and phase)."""

    where: str
    seconds: float
    cpu_s: float | None = None
    wait_s: float | None = None
    samples: list[tuple[float, str]] = field(default_factory=list)
    waiting: str = ""  # the loop's other tasks, what the stall held up (the API, a worker, a fake server)

    def text(self) -> str:
        head = f"loop stalled {self.seconds:.1f} s in {self.where}"
        if self.cpu_s is not None and self.wait_s is not None:
            asleep = max(0.0, self.seconds - self.cpu_s - self.wait_s)
            head += (
                f" (its thread: {self.cpu_s:.2f} s on a CPU, {self.wait_s:.2f} s waiting for one,"
                f" {asleep:.2f} s asleep: a blocking call, or waiting for the GIL)"
            )
        lines = [head, f"  tasks held up: {self.waiting or 'none'}"]
        previous = None
        for at, stack in self.samples:
            lines.append(f"  at +{at:.1f} s:" + (" the same stack" if stack == previous else ""))
            if stack != previous:
                lines.extend("    " + line for line in stack.rstrip().splitlines())
            previous = stack
        return "\n".join(lines)


@dataclass
class _Watch:
    loop: weakref.ReferenceType[WatchedLoop]
    stall: Stall | None = None
    since: float = 0.0
    before: tuple[float, float] | None = None  # the thread's schedstat when last seen turning
    next_sample: float = 0.0


class Watchdog:
    """The thread that checks the watched loops; ``where`` names what the process is running."""

    def __init__(self, threshold_s: float, log: Path | None) -> None:
        self.threshold_s = threshold_s
        self.log = log
        self.where = "(no test)"
        self.done: list[Stall] = []  # ended stalls not yet taken by a report
        self._watches: list[_Watch] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="loop-watchdog", daemon=True)
        self._thread.start()

    def watch(self, loop: WatchedLoop) -> None:
        with self._lock:
            self._watches.append(_Watch(weakref.ref(loop)))

    def take(self) -> list[Stall]:
        """The stalls that ended since the last call (and those still going, as they are now)."""
        with self._lock:
            self._check(time.monotonic())
            out, self.done = self.done, []
            out += [w.stall for w in self._watches if w.stall is not None]
        return out

    def _run(self) -> None:
        period = min(0.25, self.threshold_s / 4)
        while True:
            time.sleep(period)
            with self._lock:
                self._check(time.monotonic())

    def _check(self, now: float) -> None:
        kept = []
        for w in self._watches:
            loop = w.loop()
            if loop is None or loop.is_closed():
                self._end(w, now)
                continue
            kept.append(w)
            late = now - loop.turned
            if not loop.is_running() or late <= self.threshold_s:
                self._end(w, now)
                if late <= 2 * BEAT_S:  # the thread's figures from where the loop last turned
                    w.before = _schedstat(loop.native_tid)
                continue
            if w.stall is None:
                w.stall = Stall(self.where, late, waiting=_tasks(loop))
                w.since = loop.turned
                w.next_sample = now
            w.stall.seconds = late
            if now >= w.next_sample and len(w.stall.samples) < MAX_SAMPLES:
                w.stall.samples.append((late, self._stack(loop)))
                w.next_sample = now + 1.0
            self._account(w, loop)
        self._watches = kept

    def _account(self, w: _Watch, loop: WatchedLoop) -> None:
        after = _schedstat(loop.native_tid)
        if w.stall is not None and w.before is not None and after is not None:
            w.stall.cpu_s = after[0] - w.before[0]
            w.stall.wait_s = after[1] - w.before[1]

    def _end(self, w: _Watch, now: float) -> None:
        if w.stall is None:
            return
        stall, w.stall = w.stall, None
        self.done.append(stall)
        if self.log is not None:
            with open(self.log, "a") as f:
                f.write(stall.text() + "\n\n")

    @staticmethod
    def _stack(loop: WatchedLoop) -> str:
        ident = getattr(loop, "_thread_id", None)
        frame = sys._current_frames().get(ident) if ident is not None else None
        if frame is None:
            return "(the loop's thread has no frame)"
        frames = traceback.extract_stack(frame)
        # what the loop was running: the frames below the callback's run (or the innermost 16)
        runs = [i for i, f in enumerate(frames) if f.filename.endswith(os.path.join("asyncio", "events.py"))]
        return "".join(traceback.format_list(frames[runs[-1] + 1 :] if runs else frames[-16:]))


class _Policy(asyncio.DefaultEventLoopPolicy):
    def __init__(self, dog: Watchdog) -> None:
        super().__init__()
        self.dog = dog

    def new_event_loop(self) -> asyncio.AbstractEventLoop:
        loop = WatchedLoop()
        self.dog.watch(loop)
        return loop


def threshold_s() -> float:
    """The threshold of a stall, AGENTMILL_LOOP_STALL_S (0: no watchdog)."""
    return float(os.environ.get("AGENTMILL_LOOP_STALL_S", "1.0"))


def install(name: str) -> Watchdog | None:
    """Watches every loop made from now on through the event-loop policy (None when turned off by
    ``AGENTMILL_LOOP_STALL_S=0``); ``name`` names this process's log file."""
    threshold = threshold_s()
    if threshold <= 0:
        return None
    log_dir = os.environ.get("AGENTMILL_LOOP_STALL_LOG")
    log = None
    if log_dir:
        Path(log_dir).mkdir(parents=True, exist_ok=True)
        log = Path(log_dir) / f"{name}.log"
    dog = Watchdog(threshold, log)
    asyncio.set_event_loop_policy(_Policy(dog))
    return dog
