"""What a run leaves in its session and reads back from it, as pure functions the stores share:
the run loop a completed run becomes (seed 001), and recall of a past tool result by its id."""

from __future__ import annotations

import orjson

from agentmill_client.models import RunResult, RunStatus, ToolCall, ToolResult
from worker import context
from worker.config import MAX_RECALL_IDS, RECALL_TOOL
from worker.history_tools import LOAD_OLDER_HISTORY, SEARCH_HISTORY
from worker.machine import RunState
from worker.ports import SessionUpdate

__all__ = [
    "MAX_RECALL_CHARS",
    "past_result",
    "recall_answer",
    "recall_id",
    "recall_ids",
    "recalled",
    "recalled_many",
    "session_call_id",
    "session_update",
]

MAX_RECALL_CHARS = 64_000  # a recall of several ids, as JSON (each result is cut to its share)


_INTERNAL = frozenset({RECALL_TOOL, LOAD_OLDER_HISTORY, SEARCH_HISTORY})  # not kept as the session's results


def session_call_id(run_id: str, call_id: str) -> str:
    """How a session's later runs name (and recall) a past run's call: ``<runId>/<toolCallId>``."""
    return f"{run_id}/{call_id}"


def session_update(state: RunState, result: RunResult, now_ms: int) -> SessionUpdate | None:
    """A completed run becomes a run loop of its session; aborted and failed runs leave no trace (seed 001)."""
    if state.session_id is None:
        return None
    if result.status != RunStatus.COMPLETED:
        return SessionUpdate(state.session_id)
    user = next((m for m in state.transcript if m.role == "user"), None)
    if user is None:
        return SessionUpdate(state.session_id)
    if isinstance(user.content, list):  # a session keeps images as placeholders, not their data
        user = user.model_copy(update={"content": user.text})
    # Call ids are unique in a run only (c1.0 in every run): the session knows them as <runId>/<id>.
    tool_results = [
        (session_call_id(state.run_id, m.tool_call_id),
         ToolResult(tool_call_id=m.tool_call_id, name=m.name or "", content=m.text))
        for m in state.transcript
        if m.role == "tool" and m.tool_call_id and m.name not in _INTERNAL
    ]  # fmt: skip
    loop = context.RunLoop(
        run_id=state.run_id,
        started_at_ms=state.started_at_ms,
        ended_at_ms=now_ms,
        user=user,
        assistant=result.final_assistant_message,
        tool_call_ids=[i for i, _ in tool_results],
        tool_calls=[context.PastCall(id=i, name=r.name) for i, r in tool_results],
    )
    return SessionUpdate(
        state.session_id,
        loop.model_dump_json(by_alias=True).encode(),
        [(i, r.model_dump_json(by_alias=True).encode()) for i, r in tool_results],
    )


def recall_id(call: ToolCall) -> str:
    """The id a recall_tool_call asks for ("" when its arguments name none)."""
    try:
        return str(orjson.loads(call.arguments or "{}").get("callId", ""))
    except (orjson.JSONDecodeError, AttributeError):
        return ""


def recall_ids(call: ToolCall) -> list[str]:
    """The ids a recall_tool_call asks for: ``callIds`` (at most MAX_RECALL_IDS, in order, no
    repeats) or else ``callId``; [] when its arguments name none."""
    try:
        args = orjson.loads(call.arguments or "{}")
    except orjson.JSONDecodeError:
        return []
    if not isinstance(args, dict):
        return []
    many = args.get("callIds")
    if isinstance(many, list) and many:
        return list(dict.fromkeys(str(i) for i in many if i))[:MAX_RECALL_IDS]
    one = args.get("callId")
    return [str(one)] if one else []


def recalled_many(call: ToolCall, found: list[tuple[str, ToolResult | None]]) -> ToolResult:
    """The result of a recall of several ids: ``{"results": [{callId, content, isError} | {callId,
    error}]}``, each content cut to its share of MAX_RECALL_CHARS; an error only if none was found."""
    share = MAX_RECALL_CHARS // max(1, len(found)) - 100
    items: list[dict[str, object]] = []
    for wanted, past in found:
        if past is None:
            items.append({"callId": wanted, "error": "tool call result not found"})
        else:
            cut = past.content if len(past.content) <= share else past.content[:share] + context.TRUNCATED
            items.append({"callId": wanted, "content": cut, "isError": past.is_error})
    body = orjson.dumps({"results": items}).decode()
    missing = all(p is None for _, p in found)
    return ToolResult(tool_call_id=call.id, name=call.name, content=body, is_error=missing)


def past_result(raw: bytes | str | None) -> ToolResult | None:
    """A session's past tool result, as its results hash holds it."""
    return ToolResult.model_validate_json(raw) if raw is not None else None


def recalled(call: ToolCall, wanted: str, past: ToolResult | None) -> ToolResult:
    """The recall call's result: the past result's content under this call's id, or an error."""
    if past is None:
        content = orjson.dumps({"error": "tool call result not found", "callId": wanted}).decode()
        return ToolResult(tool_call_id=call.id, name=call.name, content=content, is_error=True)
    return ToolResult(tool_call_id=call.id, name=call.name, content=past.content, is_error=past.is_error)


def recall_answer(call: ToolCall, found: list[tuple[str, ToolResult | None]]) -> ToolResult:
    """One id asked for: its result as it was (or a not-found error); several: ``recalled_many``."""
    if len(found) > 1:
        return recalled_many(call, found)
    wanted, past = found[0] if found else ("", None)
    return recalled(call, wanted, past)
