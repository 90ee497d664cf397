"""What a run leaves in its session and reads back from it, as pure functions the stores share:
the calls every run executed (from its tool records, with their outcome), the run loop a completed
run becomes, and recall of a past tool result by its id."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import orjson

from agentmill_client.models import RunResult, RunStatus, ToolCall, ToolResult
from shared.session_calls import CONTEXT_TOOLS
from shared.tool_records import ToolRecord
from worker.core import context
from worker.core.commit_step import SessionUpdate
from worker.core.config import MAX_RECALL_IDS
from worker.machine import RunState

__all__ = [
    "MAX_RECALL_CHARS",
    "MAX_SEARCHED_CALLS",
    "call_order",
    "calls_update",
    "past_result",
    "recall_answer",
    "recall_id",
    "recall_ids",
    "recalled",
    "recalled_many",
    "session_call_id",
    "session_calls",
    "session_update",
]

MAX_RECALL_CHARS = 64_000  # a recall of several ids, as JSON (each result is cut to its share)
MAX_SEARCHED_CALLS = 500  # search_history reads the newest of them


def session_call_id(run_id: str, call_id: str) -> str:
    """How a session's later runs name (and recall) a past run's call: ``<runId>/<toolCallId>``."""
    return f"{run_id}/{call_id}"


def session_calls(
    run_id: str, records: Mapping[str, ToolRecord]
) -> list[tuple[context.PastCall, ToolResult]]:
    """Every call the run executed, from its tool records (not its transcript, which compaction
    cuts): each done record but the context tools', as the session keeps it, in the order the model
    made them (calledAt, then the call's id): shared/session_calls.py, which prelude.lua's finalize
    follows for a run ended outside its worker."""
    done = [(i, r, res) for i, r in records.items() if (res := r.recorded) is not None]
    out = []
    for i, rec, res in sorted(done, key=lambda t: (t[1].called_at_ms, call_order(t[0]))):
        name = res.name or rec.name
        if name in CONTEXT_TOOLS:
            continue
        sid = session_call_id(run_id, i)
        past = context.PastCall(id=sid, name=name, run_id=run_id, is_error=res.is_error,
                                called_at_ms=rec.called_at_ms)  # fmt: skip
        out.append((past, res.model_copy(update={"tool_call_id": i, "name": name})))
    return out


def call_order(call_id: str) -> tuple[int, int, int, str]:
    """agentmill's call ids ``c<model call>.<position>`` in the order they were made (``c10.0``
    after ``c9.1``); any other id by its text, after them."""
    head, _, pos = call_id.removeprefix("c").partition(".")
    if call_id.startswith("c") and head.isdigit() and pos.isdigit():
        return (0, int(head), int(pos), "")
    return (1, 0, 0, call_id)


def session_update(
    state: RunState, result: RunResult, records: Mapping[str, ToolRecord], now_ms: int
) -> SessionUpdate | None:
    """What a run leaves in its session when it ends. Every run, however it ended, leaves the calls
    it executed (from ``records``: compacted away or not, with their outcome and time), which later
    runs recall and search. A completed run also becomes a run loop, its messages; a
    failed or aborted run's messages do not touch the session's."""
    if state.session_id is None:
        return None
    calls = session_calls(state.run_id, records)
    update = calls_update(state.session_id, calls)
    user = next((m for m in state.transcript if m.role == "user"), None)
    if result.status != RunStatus.COMPLETED or user is None:
        return update
    if isinstance(user.content, list):  # a session keeps images as placeholders, not their data
        user = user.model_copy(update={"content": user.text})
    loop = context.RunLoop(
        run_id=state.run_id,
        started_at_ms=state.started_at_ms,
        ended_at_ms=now_ms,
        user=user,
        assistant=result.final_assistant_message,
        tool_call_ids=[c.id for c, _ in calls],
        tool_calls=[c for c, _ in calls],
    )
    return replace(update, loop=loop.model_dump_json(by_alias=True).encode())


def calls_update(session_id: str, calls: list[tuple[context.PastCall, ToolResult]]) -> SessionUpdate:
    """The session update of a run's calls (``session_calls``) alone: its calls list's entries and
    their results, as JSON."""
    results = [(c.id, r.model_dump_json(by_alias=True).encode()) for c, r in calls]
    return SessionUpdate(
        session_id, b"", results, [c.model_dump_json(by_alias=True).encode() for c, _ in calls]
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
