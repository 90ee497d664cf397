"""The run's window over its session's past turns (seed 003's ``contextWindowSize``), and
``load_older_history``, which the machine answers itself: pure, from the checkpointed state.

``RunState.history`` holds the past turns the run loaded (user message, then the reply, per turn);
``context_window_size`` is how many of its newest messages the model sees (None: all, as runs
checkpointed before it). Without the context tools a run loads only the turns it shows.
"""

from __future__ import annotations

from typing import Any

import orjson

from agentmill_client.models import EventKind, Message, ToolCall, ToolResult
from worker.machine.commands import Emit
from worker.machine.state import RunState

__all__ = ["expand_window", "initial_window", "windowed_history"]


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
