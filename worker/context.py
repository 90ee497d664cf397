"""Pure context-window helpers (seed 002): run-loop history reduction and deterministic compaction."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import Field

from shared.models import Message, Model
from shared.profiles import ContextConfig

TRUNCATED = "…[truncated]"


class RunLoop(Model):
    """One finished turn of a session: its user message and the final assistant reply."""

    run_id: str
    started_at_ms: int
    ended_at_ms: int
    user: Message
    assistant: Message | None = None
    tool_call_ids: list[str] = Field(default_factory=list)


def truncate(m: Message, limit: int) -> Message:
    if len(m.content) <= limit:
        return Message(role=m.role, content=m.content)
    return Message(role=m.role, content=m.content[:limit] + TRUNCATED)


def reduce_history(loops: Sequence[RunLoop], cfg: ContextConfig, now_ms: int) -> list[Message]:
    """Past run loops as user + final reply, each truncated, newest ``maxRunLoops`` within ``maxTimeRange``."""
    recent = [lp for lp in loops if now_ms - lp.started_at_ms <= cfg.max_time_range_ms]
    if cfg.max_run_loops == 0:
        return []
    out: list[Message] = []
    for lp in recent[-cfg.max_run_loops :]:
        out.append(truncate(lp.user, cfg.max_message_length))
        if lp.assistant is not None:
            out.append(truncate(lp.assistant, cfg.max_message_length))
    return out


def split_for_compaction(
    transcript: Sequence[Message], keep_recent: int
) -> tuple[Message, list[Message], list[Message]] | None:
    """(the user's request, the middle to summarise, the recent tail), or None when nothing would go.

    The tail never starts inside a tool round (an assistant tool call stays with its results).
    """
    msgs = list(transcript)
    if len(msgs) <= keep_recent + 2:
        return None
    start = len(msgs) - keep_recent
    while start > 1 and msgs[start].role == "tool":
        start -= 1
    middle = msgs[1:start]
    if not middle:
        return None
    return msgs[0], middle, msgs[start:]


def summary_message(removed: int, summary: str) -> Message:
    return Message(role="user", content=f"[{removed} earlier messages were compacted]\n{summary}"[:16_000])


def truncation_summary(middle: Sequence[Message]) -> str:
    """The deterministic summary: one truncated line per removed message."""
    lines = []
    for m in middle:
        what: Any = m.content[:200]
        if m.tool_calls:
            what = "calls " + ", ".join(f"{c.name}({c.arguments[:80]})" for c in m.tool_calls)
        lines.append(f"- {m.role}{' ' + (m.name or '') if m.role == 'tool' else ''}: {what}")
    return "\n".join(lines)[:8000]


def compact(
    transcript: Sequence[Message], keep_recent: int, summary: str | None = None
) -> tuple[list[Message], int]:
    """Keep the first message (the user's request) and the recent tail; replace the middle with a
    summary (``summary`` when a model wrote one, else a deterministic truncation). Returns the new
    transcript and how many messages were replaced."""
    parts = split_for_compaction(transcript, keep_recent)
    if parts is None:
        return list(transcript), 0
    head, middle, tail = parts
    text = summary if summary is not None else truncation_summary(middle)
    return [head, summary_message(len(middle), text), *tail], len(middle)
