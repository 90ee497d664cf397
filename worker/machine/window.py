"""The run's window over its session's past turns (the design documents' ``contextWindowSize``), and
``load_older_history``, which the machine answers itself: pure, from the checkpointed state.

``RunState.history`` holds the past turns the run loaded (user message, then the reply, per turn);
``context_window_size`` is how many of its newest messages the model sees (None: all, as runs
checkpointed before it). Without the context tools a run loads only the turns it shows.

A context overflow reduces the whole context, older turns included: ``OVERFLOW`` says whether the
run compacts its own messages, narrows its window (``narrow_window``: back to the turns it opened
with, then to none) or fails ``context_overflow``; it never fails while past turns are shown.
"""

from __future__ import annotations

from typing import Any

import orjson

from agentmill_client.models import EventKind, Message, ToolCall, ToolResult
from worker.core import context
from worker.machine.commands import Emit
from worker.machine.state import RunState

__all__ = ["OVERFLOW", "expand_window", "initial_window", "narrow_window", "on_overflow", "windowed_history"]

# What a context overflow does, by (compaction retries left, the run's own messages can still be
# compacted, past turns are shown): compact them, narrow the window, or fail.
# fmt: off
OVERFLOW: dict[tuple[bool, bool, bool], str] = {
    (True, True, True): "compact",   (True, True, False): "compact",
    (True, False, True): "narrow",   (True, False, False): "compact",  # nothing to gain: retried to the limit
    (False, True, True): "narrow",   (False, False, True): "narrow",
    (False, True, False): "fail",    (False, False, False): "fail",
}
# fmt: on


def initial_window(history: list[Message], turns: int) -> int:
    """How many of the newest messages make the newest ``turns`` turns (each starts with a user message)."""
    if turns <= 0:
        return 0
    seen = 0
    for i in range(len(history) - 1, -1, -1):
        if history[i].role == "user":
            seen += 1
            if seen == turns:
                return len(history) - i
    return len(history)


def windowed_history(s: RunState) -> list[Message]:
    size = s.context_window_size
    if size is None or size >= len(s.history):
        return list(s.history)
    return s.history[len(s.history) - size :] if size > 0 else []


def on_overflow(s: RunState) -> str:
    """``OVERFLOW``'s answer for the run's state: "compact", "narrow" or "fail"."""
    comp = s.cfg.compaction
    retries_left = s.overflow_retries < comp.max_overflow_retries
    compactable = context.split_for_compaction(s.transcript, comp.keep_recent) is not None
    return OVERFLOW[(retries_left, compactable, bool(windowed_history(s)))]


def narrow_window(s: RunState) -> tuple[RunState, Emit]:
    """The window after an overflow: back to the turns the run opened with when it shows more
    (what ``load_older_history`` added goes first), else no past turns; the
    ``context_window_narrowed`` status event says the new size and how many messages left it."""
    shown = len(windowed_history(s))
    ctx = s.cfg.context
    opening = initial_window(s.history, ctx.max_run_loops) if ctx.history_tools else len(s.history)
    new = opening if shown > opening else 0
    s = s.model_copy(update={"context_window_size": new})
    body: dict[str, Any] = {"status": "context_window_narrowed", "reason": "overflow",
                            "contextWindowSize": new, "removed": shown - new}  # fmt: skip
    return s, Emit(EventKind.STATUS, body)


def expand_window(s: RunState, call: ToolCall) -> tuple[RunState, ToolResult, Emit]:
    """Widen the window by ``expandContextWindowSize`` messages, up to every message the run loaded;
    the call's result and the ``context_window_expanded`` status event both say the new size."""
    total = len(s.history)
    size = total if s.context_window_size is None else min(s.context_window_size, total)
    new = min(total, size + s.cfg.context.expand_context_window_size)
    s = s.model_copy(update={"context_window_size": new})
    body: dict[str, Any] = {"contextWindowSize": new, "added": new - size, "olderLeft": total - new}
    if new == size:
        body["note"] = "no older history to load"
    result = ToolResult(tool_call_id=call.id, name=call.name, content=orjson.dumps(body).decode())
    return (
        s,
        result,
        Emit(EventKind.STATUS, {"status": "context_window_expanded", "toolCallId": call.id, **body}),
    )
