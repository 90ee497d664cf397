"""Pure context-window helpers: run-loop history reduction and deterministic compaction."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import Field

from agentmill_client.models import Message, Model
from shared.profiles import ContextConfig

__all__ = [
    "MAX_NOTE_CHARS",
    "RECALL_HINT",
    "TRUNCATED",
    "PastCall",
    "RunLoop",
    "calls_note",
    "compact",
    "compacted_calls",
    "past_calls",
    "reduce_history",
    "split_for_compaction",
    "summary_message",
    "truncate",
    "truncation_summary",
]


TRUNCATED = "…[truncated]"
MAX_NOTE_CHARS = 600  # the line naming a past turn's tool calls
RECALL_HINT = "recallable by id with recall_tool_call"


class PastCall(Model):
    """A tool call of a session's past run, by its session call id (``<runId>/<toolCallId>``), with
    its outcome and when the model made it (unix ms; 0: kept before calls carried it)."""

    id: str
    name: str = ""
    run_id: str = ""
    is_error: bool = False
    called_at_ms: int = 0


class RunLoop(Model):
    """One finished turn of a session: its user message and the final assistant reply."""

    run_id: str
    started_at_ms: int
    ended_at_ms: int
    user: Message
    assistant: Message | None = None
    tool_call_ids: list[str] = Field(default_factory=list)
    tool_calls: list[PastCall] = Field(default_factory=list)  # ids with names (older loops: ids only)


def calls_note(calls: Sequence[PastCall]) -> str:
    """One bounded line naming tool calls by id and tool, e.g. ``[tool calls, …: c1 echo, c2 calc
    (error)]``: a call whose result was an error says so."""
    head = f"[tool calls, {RECALL_HINT}: "
    parts: list[str] = []
    size = len(head) + 1
    for i, c in enumerate(calls):
        part = f"{c.id} {c.name}".strip() + (" (error)" if c.is_error else "")
        more = f" … and {len(calls) - i} more"
        if size + len(part) + 2 + len(more) > MAX_NOTE_CHARS:
            parts.append(more.strip())
            break
        parts.append(part)
        size += len(part) + 2
    return head + ", ".join(parts) + "]"


def past_calls(lp: RunLoop) -> list[PastCall]:
    return lp.tool_calls or [PastCall(id=i) for i in lp.tool_call_ids]


def truncate(m: Message, limit: int) -> Message:
    text = m.text  # an image is a placeholder in a past turn
    if len(text) <= limit:
        return Message(role=m.role, content=text, created_at=m.created_at)
    return Message(role=m.role, content=text[:limit] + TRUNCATED, created_at=m.created_at)


def reduce_history(loops: Sequence[RunLoop], cfg: ContextConfig, now_ms: int) -> list[Message]:
    """Past run loops as user + final reply, each truncated, newest ``maxRunLoops`` within ``maxTimeRange``."""
    recent = [lp for lp in loops if now_ms - lp.started_at_ms <= cfg.max_time_range_ms]
    if cfg.max_run_loops == 0:
        return []
    out: list[Message] = []
    for lp in recent[-cfg.max_run_loops :]:
        out.append(truncate(lp.user, cfg.max_message_length))
        reply = truncate(lp.assistant, cfg.max_message_length) if lp.assistant is not None else None
        calls = past_calls(lp)
        if calls:  # the turn's tool calls, by id, so the model can recall their results
            text = calls_note(calls) + ("\n" + reply.text if reply is not None else "")
            reply = Message(role="assistant", content=text, created_at=reply.created_at if reply else None)
        if reply is not None:
            out.append(reply)
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
    """The deterministic summary: one truncated line per removed message, tool calls with their ids."""
    lines = []
    for m in middle:
        what: Any = m.text[:200]
        if m.tool_calls:
            what = "calls " + ", ".join(f"{c.name}({c.arguments[:80]}) [{c.id}]" for c in m.tool_calls)
        who = f" {m.name or ''} [{m.tool_call_id}]" if m.role == "tool" else ""
        lines.append(f"- {m.role}{who}: {what}")
    if any(m.role == "tool" for m in middle):
        lines.insert(0, f"(tool results below are cut short; the full ones are {RECALL_HINT})")
    return "\n".join(lines)[:8000]


def compacted_calls(middle: Sequence[Message]) -> list[PastCall]:
    return [
        PastCall(id=m.tool_call_id, name=m.name or "") for m in middle if m.role == "tool" and m.tool_call_id
    ]


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
    calls = compacted_calls(middle)
    if summary is not None and calls:  # a model's summary may drop the ids: name them
        text = text.rstrip() + "\n" + calls_note(calls)
    return [head, summary_message(len(middle), text), *tail], len(middle)
