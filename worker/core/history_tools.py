"""The internal context tools besides recall (the design documents' "load older chat history" and
"query older tool call information" and search over past conversation): their names, what
the model is told about them, and the pure search ``search_history`` answers with.

- ``load_older_history``: widens the run's window of past turns by the profile's
  ``context.expandContextWindowSize`` messages, up to what the profile lets a run load
  (``context.maxHistoryLoops`` turns). Answered by the machine itself (worker/machine/window.py).
- ``search_history``: words and/or a tool name over the session's past turns, the tool calls of
  its past runs (failed and aborted ones' too), and this run's own results that compaction took out
  of the conversation; each hit cites its call id for ``recall_tool_call``, and says ``isError``
  when the result was an error. The runner reads (``SessionStore.load_past``), this
  module ranks: deterministic for the same session and run.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from agentmill_client.models import ToolCall, ToolResult
from shared.session_calls import LOAD_OLDER_HISTORY, SEARCH_HISTORY
from worker.core import context

__all__ = [
    "HISTORY_PROMPT",
    "LOAD_OLDER_DESCRIPTION",
    "LOAD_OLDER_HISTORY",
    "LOAD_OLDER_PARAMETERS",
    "MAX_SEARCH_CHARS",
    "SEARCH_DESCRIPTION",
    "SEARCH_HISTORY",
    "SEARCH_PARAMETERS",
    "Hit",
    "search",
    "search_args",
]

MAX_SEARCH_CHARS = 8_000  # a search_history result, as JSON
SNIPPET_CHARS = 240

LOAD_OLDER_DESCRIPTION = (
    "Bring older turns of this conversation (earlier runs of the session) into your context. Each "
    "call adds a fixed number of older messages, up to a limit; the result says the new size."
)
LOAD_OLDER_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}}
SEARCH_DESCRIPTION = (
    "Search earlier turns of this conversation and earlier tool results (also those no longer in "
    "your context) by words and/or tool name. Hits cite a callId; recall_tool_call returns a "
    "result in full."
)
SEARCH_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {
            "type": "string",
            "description": "words to look for (any of them; more matches rank higher)",
        },
        "tool": {"type": "string", "description": "only results of this tool"},
        "limit": {"type": "integer", "minimum": 1, "description": "most hits to return"},
    },
}
HISTORY_PROMPT = (
    f"Older turns of this conversation may be left out. {LOAD_OLDER_HISTORY} brings more of them in; "
    f"{SEARCH_HISTORY} finds earlier turns and tool results by words or tool name."
)


@dataclass(frozen=True, slots=True)
class Hit:
    """One searchable thing: a tool result (``call_id`` set) or a past turn's text."""

    text: str
    tool: str = ""
    call_id: str = ""
    run_id: str = ""
    call_ids: tuple[str, ...] = ()  # a past turn's calls
    is_error: bool = False  # a tool result that was an error


def search_args(call: ToolCall) -> tuple[list[str], str, int | None]:
    """(query words lowercased, tool name, limit) from the call's arguments; bad JSON gives none."""
    try:
        args = orjson.loads(call.arguments or "{}")
    except orjson.JSONDecodeError:
        args = {}
    if not isinstance(args, dict):
        args = {}
    words = sorted({w.lower() for w in re.findall(r"\w+", str(args.get("query") or ""))})
    limit = args.get("limit")
    return words, str(args.get("tool") or ""), limit if isinstance(limit, int) and limit > 0 else None


def candidates(
    loops: Sequence[context.RunLoop],
    past: Mapping[str, ToolResult],
    own: Iterable[ToolResult],
    calls: Sequence[context.PastCall] = (),
) -> list[Hit]:
    """Newest first: the run's own results, then each past turn (newest turn first), its results
    then its text; ``calls`` (the session's calls, oldest first) adds those of no turn here (a
    failed or aborted run's, an older turn's) where their time puts them."""
    out = [Hit(r.content, r.name, r.tool_call_id, is_error=r.is_error) for r in own]
    in_turns = {c.id for lp in loops for c in context.past_calls(lp)}
    rest = [c for c in reversed(calls) if c.id not in in_turns]

    def calls_since(t: int) -> None:
        while rest and rest[0].called_at_ms >= t:
            c = rest.pop(0)
            if (r := past.get(c.id)) is not None:
                out.append(Hit(r.content, r.name or c.name, c.id, c.run_id, is_error=r.is_error))

    for lp in reversed(loops):
        calls_since(lp.ended_at_ms)
        turn = context.past_calls(lp)
        for c in turn:
            if (r := past.get(c.id)) is not None:
                out.append(Hit(r.content, r.name or c.name, c.id, lp.run_id, is_error=r.is_error))
        said = [lp.user.text, lp.assistant.text if lp.assistant is not None else ""]
        out.append(Hit("\n".join(said), run_id=lp.run_id, call_ids=tuple(c.id for c in turn)))
    calls_since(0)
    return out


def _snippet(text: str, words: Sequence[str]) -> str:
    low = text.lower()
    at = min((i for w in words if (i := low.find(w)) >= 0), default=0)
    start = max(0, at - SNIPPET_CHARS // 4)
    cut = text[start : start + SNIPPET_CHARS]
    return ("…" if start else "") + cut + ("…" if start + SNIPPET_CHARS < len(text) else "")


def search(call: ToolCall, hits: Sequence[Hit], max_results: int) -> ToolResult:
    """The search_history call's result: the best hits as JSON (most query words matched first,
    then newest first), at most ``max_results`` and MAX_SEARCH_CHARS."""
    words, tool, limit = search_args(call)
    if not words and not tool:
        why = orjson.dumps({"error": "give query words, a tool name, or both"}).decode()
        return ToolResult(tool_call_id=call.id, name=call.name, content=why, is_error=True)
    scored = []
    for order, h in enumerate(hits):
        if tool and h.tool != tool:
            continue
        low = h.text.lower()
        score = sum(1 for w in words if w in low)
        if words and score == 0:
            continue
        scored.append((-score, order, h))
    scored.sort(key=lambda t: (t[0], t[1]))
    found: list[dict[str, Any]] = []
    size = 0
    for _, _, h in scored[: min(limit or max_results, max_results)]:
        item: dict[str, Any] = {"runId": h.run_id} if h.run_id else {}
        if h.call_id:
            item.update(callId=h.call_id, tool=h.tool)
            if h.is_error:
                item["isError"] = True
        else:
            item["callIds"] = list(h.call_ids)
        item["snippet"] = _snippet(h.text, words)
        size += len(orjson.dumps(item))
        if size > MAX_SEARCH_CHARS - 200:
            break
        found.append(item)
    body = {"hits": found, "more": len(scored) > len(found)}
    return ToolResult(tool_call_id=call.id, name=call.name, content=orjson.dumps(body).decode())
