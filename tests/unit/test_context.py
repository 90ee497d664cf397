"""Context windows: bounds, determinism, and compaction that never splits a tool round."""

from __future__ import annotations

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from agentmill_client.models import Message, ToolCall
from shared.profiles import ContextConfig
from worker.core.context import (
    MAX_NOTE_CHARS,
    RECALL_HINT,
    TRUNCATED,
    PastCall,
    RunLoop,
    calls_note,
    compact,
    reduce_history,
)

DAY = 24 * 3_600_000
text = st.text(min_size=0, max_size=1200)


@st.composite
def loops(draw: st.DrawFn) -> list[RunLoop]:
    n = draw(st.integers(0, 25))
    starts = sorted(draw(st.lists(st.integers(0, 30 * DAY), min_size=n, max_size=n)))
    out = []
    for i, t in enumerate(starts):
        reply = draw(st.one_of(st.none(), text))
        out.append(
            RunLoop(
                run_id=f"r{i}",
                started_at_ms=t,
                ended_at_ms=t + 1,
                user=Message(role="user", content=draw(text)),
                assistant=None if reply is None else Message(role="assistant", content=reply),
                tool_call_ids=[f"c{i}"],
            )
        )
    return out


@settings(max_examples=200, deadline=None)
@given(loops(), st.integers(0, 12), st.integers(1, 600), st.integers(0, 30 * DAY), st.integers(0, 31 * DAY))
def test_window_stays_within_its_bounds(
    ls: list[RunLoop], max_loops: int, max_len: int, time_range: int, now: int
) -> None:
    cfg = ContextConfig(max_run_loops=max_loops, max_message_length=max_len, max_time_range_ms=time_range)
    window = reduce_history(ls, cfg, now)
    assert len(window) <= 2 * max_loops
    assert all(m.role in ("user", "assistant") and not m.tool_calls for m in window)  # no tool results, ever
    note = MAX_NOTE_CHARS + 1  # a past turn's reply starts with the line naming its tool calls
    assert all(
        len(m.content) <= max_len + len(TRUNCATED) + (note if m.role == "assistant" else 0) for m in window
    )
    kept = [lp for lp in ls if now - lp.started_at_ms <= time_range][-max_loops:] if max_loops else []
    replies = [m.content for m in window if m.role == "assistant"]
    assert len(replies) == len(kept)  # every kept turn made a tool call, so every one names it
    assert all(
        r.startswith(f"[tool calls, {RECALL_HINT}: c{lp.run_id[1:]}")
        for r, lp in zip(replies, kept, strict=True)
    )
    assert [m.content[:max_len] for m in window if m.role == "user"] == [
        lp.user.content[:max_len] for lp in kept
    ]
    # Deterministic: the same history and inputs give byte-identical model messages.
    again = reduce_history([RunLoop.model_validate_json(lp.model_dump_json()) for lp in ls], cfg, now)
    assert orjson.dumps([m.model_dump() for m in window]) == orjson.dumps([m.model_dump() for m in again])


@st.composite
def transcripts(draw: st.DrawFn) -> list[Message]:
    msgs = [Message(role="user", content="the request")]
    for r in range(draw(st.integers(0, 20))):
        k = draw(st.integers(0, 3))
        if k == 0:
            msgs.append(Message(role="assistant", content=f"thought {r}"))
            continue
        calls = [ToolCall(id=f"c{r}.{i}", name="t", arguments="{}") for i in range(k)]
        msgs.append(Message(role="assistant", content="", tool_calls=calls))
        msgs += [Message(role="tool", content=f"result {c.id}", tool_call_id=c.id, name="t") for c in calls]
    return msgs


@settings(max_examples=200, deadline=None)
@given(transcripts(), st.integers(1, 12))
def test_compaction_keeps_the_request_and_whole_tool_rounds(msgs: list[Message], keep: int) -> None:
    out, removed = compact(msgs, keep)
    assert out[0] == msgs[0]
    if removed == 0:
        assert out == msgs
        return
    assert len(out) == len(msgs) - removed + 1
    tail = out[2:]
    assert tail == msgs[len(msgs) - len(tail) :]  # the recent messages survive verbatim
    assert len(tail) >= keep and tail[0].role != "tool"  # never starts inside a tool round
    assert out[1].role == "user" and f"[{removed} earlier messages were compacted]" in out[1].content
    assert compact(msgs, keep) == (out, removed)  # deterministic


def test_the_calls_note_is_bounded_and_names_what_it_drops() -> None:
    many = [PastCall(id=f"call_{i:04d}", name="calculator") for i in range(200)]
    note = calls_note(many)
    assert len(note) <= MAX_NOTE_CHARS and note.startswith("[tool calls") and note.endswith("more]")
    assert "call_0000 calculator" in note
    assert calls_note([PastCall(id="a", name="echo")]) == f"[tool calls, {RECALL_HINT}: a echo]"


def test_compaction_keeps_the_ids_of_what_it_removes() -> None:
    calls = [ToolCall(id=f"k{i}", name="t", arguments="{}") for i in range(3)]
    msgs = [Message(role="user", content="go")]
    for c in calls:
        msgs += [Message(role="assistant", content="", tool_calls=[c]),
                 Message(role="tool", content="x" * 500, tool_call_id=c.id, name="t")]  # fmt: skip
    out, removed = compact(msgs, 2)
    assert (
        removed == 4
        and "[k0]" in out[1].content
        and "[k1]" in out[1].content
        and RECALL_HINT in out[1].content
    )
    by_model, _ = compact(msgs, 2, summary="the model's own words")
    assert "k0 t, k1 t" in by_model[1].content  # a model-written summary gets the ids appended
