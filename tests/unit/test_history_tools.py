"""The context tools on the pure machine and the pure search: load_older_history widens
the window of past turns, search_history ranks, recall takes several ids."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from agentmill_client.models import Message, ToolCall, ToolResult
from shared.profiles import ContextConfig
from tests.unit.machine_driver import T0, config, go, text_reply
from worker import machine as m
from worker.core import context, sessions
from worker.core.config import LOAD_OLDER_SPEC, RECALL_SPEC, SEARCH_SPEC
from worker.core.history_tools import candidates, search
from worker.machine.window import initial_window, windowed_history


def history(turns: int) -> list[Message]:
    out = []
    for i in range(turns):
        out += [Message(role="user", content=f"q{i}"), Message(role="assistant", content=f"a{i}")]
    return out


def with_tools(shown: int, expand: int) -> Any:
    ctx = ContextConfig(max_run_loops=shown, history_tools=True, expand_context_window_size=expand)
    return config(context=ctx, internal_tools=[RECALL_SPEC, LOAD_OLDER_SPEC, SEARCH_SPEC])


def loaded(cfg: Any, hist: list[Message]) -> m.RunState:
    s, _ = go(m.initial_state("r1", "s1"), m.Started(T0, cfg, [Message(role="user", content="now")]))
    s, _ = go(s, m.ContextLoaded(T0, hist))
    return s


def load_older(s: m.RunState, n: int) -> tuple[m.RunState, list[m.Command]]:
    call = ToolCall(id=f"w{n}", name="load_older_history")
    return go(s, m.ModelReplied(T0, Message(role="assistant", tool_calls=[call])))


def history_in(cmds: list[m.Command]) -> list[str]:
    req = next(c.request for c in cmds if isinstance(c, m.CallModel))
    return [x.content for x in req.messages[1:] if x.content != "now" and x.role in ("user", "assistant")
            and not x.tool_calls]  # fmt: skip


def test_the_first_input_shows_the_newest_turns_and_each_call_widens_it() -> None:
    s = loaded(with_tools(shown=1, expand=3), history(3))
    assert s.context_window_size == 2 and windowed_history(s) == history(3)[-2:]
    s, cmds = load_older(s, 1)
    note = next(
        c.payload
        for c in cmds
        if isinstance(c, m.Emit) and c.payload.get("status") == "context_window_expanded"
    )
    assert note == {
        "status": "context_window_expanded",
        "toolCallId": "w1",
        "contextWindowSize": 5,
        "added": 3,
        "olderLeft": 1,
    }
    assert s.node == m.CALLING and s.context_window_size == 5 and s.tool_calls_used == 0  # not a counted call
    assert history_in(cmds)[:5] == ["a0", "q1", "a1", "q2", "a2"]  # the older turns, in the next input
    tool_msg = s.transcript[-1]
    assert tool_msg.role == "tool" and orjson.loads(tool_msg.content)["contextWindowSize"] == 5
    s, cmds = load_older(s, 2)
    assert s.context_window_size == 6 and orjson.loads(s.transcript[-1].content)["added"] == 1
    s, cmds = load_older(s, 3)
    assert orjson.loads(s.transcript[-1].content) == {"contextWindowSize": 6, "added": 0, "olderLeft": 0,
                                                      "note": "no older history to load"}  # fmt: skip


def test_a_profile_showing_no_past_turns_starts_with_none_and_can_still_widen() -> None:
    s = loaded(with_tools(shown=0, expand=2), history(2))
    assert s.context_window_size == 0 and windowed_history(s) == []
    s, _ = load_older(s, 1)
    assert windowed_history(s) == history(2)[-2:]


def test_without_the_context_tools_the_whole_loaded_history_is_shown() -> None:
    s = loaded(config(), history(3))
    assert s.context_window_size == 6 and windowed_history(s) == history(3)
    old = s.model_copy(update={"context_window_size": None})  # a checkpoint from before the window
    assert windowed_history(old) == history(3)


@settings(max_examples=200, deadline=None)
@given(
    st.integers(0, 8),
    st.integers(0, 5),
    st.integers(1, 4),
    st.lists(st.sampled_from(["load", "text"]), max_size=8),
)
def test_the_window_only_grows_within_what_was_loaded_and_each_event_says_its_size(
    turns: int, shown: int, expand: int, steps: list[str]
) -> None:
    hist = history(turns)
    s = loaded(with_tools(shown, expand), hist)
    assert s.context_window_size == initial_window(hist, shown) <= len(hist)
    replay: list[m.Event] = []
    for n, step in enumerate(steps):
        before = s.context_window_size or 0
        if step == "text":
            replay.append(text_reply())
            s, _ = go(s, replay[-1])
            break
        call = ToolCall(id=f"w{n}", name="load_older_history")
        replay.append(m.ModelReplied(T0, Message(role="assistant", tool_calls=[call])))
        s, cmds = go(s, replay[-1])
        size = s.context_window_size or 0
        assert size == min(len(hist), before + expand) and size >= before
        sizes = [c.payload["contextWindowSize"] for c in cmds
                 if isinstance(c, m.Emit) and "contextWindowSize" in c.payload]  # fmt: skip
        assert sizes == [size]
        assert m.build_messages(s)[1 : 1 + size] == hist[len(hist) - size :]
    again = loaded(with_tools(shown, expand), hist)
    for ev in replay:  # pure: the same events give the same states
        again, _ = m.decide(again, ev)
    assert again == s


def loop(run_id: str, user: str, reply: str, calls: list[tuple[str, str]]) -> context.RunLoop:
    return context.RunLoop(run_id=run_id, started_at_ms=1, ended_at_ms=2, user=Message(role="user", content=user),
                           assistant=Message(role="assistant", content=reply),
                           tool_calls=[context.PastCall(id=f"{run_id}/{i}", name=n) for i, n in calls])  # fmt: skip


def ask(**args: Any) -> ToolCall:
    return ToolCall(id="c9.0", name="search_history", arguments=orjson.dumps(args).decode())


def test_search_finds_a_past_result_by_its_words_and_tool_and_cites_its_id() -> None:
    loops = [
        loop("r1", "weather in Oslo?", "cold", [("c1.0", "weather")]),
        loop("r2", "and Rome?", "warm", [("c1.0", "weather"), ("c2.0", "echo")]),
    ]
    past = {
        "r1/c1.0": ToolResult(tool_call_id="c1.0", name="weather", content="Oslo: -3 C, snow"),
        "r2/c1.0": ToolResult(tool_call_id="c1.0", name="weather", content="Rome: 18 C, sun"),
        "r2/c2.0": ToolResult(tool_call_id="c2.0", name="echo", content="snow in the Alps"),
    }
    own = [ToolResult(tool_call_id="c1.0", name="echo", content="compacted: snow report")]
    hits = candidates(loops, past, own)
    got = orjson.loads(search(ask(query="Oslo snow"), hits, 5).content)["hits"]
    assert got[0] == {"runId": "r1", "callId": "r1/c1.0", "tool": "weather", "snippet": "Oslo: -3 C, snow"}
    assert [h.get("callId") for h in got[1:]] == ["c1.0", "r2/c2.0", None]  # one word each, newest first
    assert got[3]["callIds"] == ["r1/c1.0"] and got[3]["runId"] == "r1"  # the turn's text cites its calls
    by_tool = orjson.loads(search(ask(tool="weather"), hits, 5).content)["hits"]
    assert [h["callId"] for h in by_tool] == ["r2/c1.0", "r1/c1.0"]
    capped = orjson.loads(search(ask(query="snow", limit=1), hits, 5).content)
    assert len(capped["hits"]) == 1 and capped["more"] is True
    assert search(ask(query="snow"), hits, 5) == search(ask(query="snow"), list(hits), 5)  # deterministic
    assert search(ask(), hits, 5).is_error


def test_search_results_are_bounded_in_size() -> None:
    own = [ToolResult(tool_call_id=f"c{i}.0", name="echo", content="needle " + "x" * 5000) for i in range(50)]
    body = search(ask(query="needle"), candidates([], {}, own), 50).content
    assert len(body) <= 8_000 and orjson.loads(body)["more"] is True


def test_recall_takes_several_ids_and_says_which_were_not_found() -> None:
    call = ToolCall(id="c3.0", name="recall_tool_call", arguments='{"callIds": ["a", "b", "a"]}')
    assert sessions.recall_ids(call) == ["a", "b"]
    res = sessions.recall_answer(
        call, [("a", ToolResult(tool_call_id="a", name="echo", content="A")), ("b", None)]
    )
    assert not res.is_error and orjson.loads(res.content)["results"] == [
        {"callId": "a", "content": "A", "isError": False},
        {"callId": "b", "error": "tool call result not found"},
    ]
    assert sessions.recall_answer(call, [("a", None), ("b", None)]).is_error
    one = ToolCall(id="c3.0", name="recall_tool_call", arguments='{"callId": "a"}')
    assert (
        sessions.recall_answer(one, [("a", ToolResult(tool_call_id="a", name="echo", content="A"))]).content
        == "A"
    )


def test_the_context_tools_are_offered_to_a_run_with_a_session_unless_the_profile_turns_them_off() -> None:
    from agentmill_client.models import ClientTool, RunInput
    from shared.profiles import AgentProfile
    from worker.core.config import ToolSpec, resolve_config

    run = RunInput.model_validate({"inputMessages": [{"role": "user", "content": "x"}], "sessionId": "s1"})
    plain = AgentProfile(name="p", tools=["echo"])
    on = AgentProfile(name="p", tools=["echo"], context=ContextConfig(history_tools=True))
    off = AgentProfile(name="p", tools=["echo"], context=ContextConfig(history_tools=False))
    specs = {"echo": ToolSpec(name="echo")}
    names = lambda cfg: [t.name for t in cfg.internal_tools]  # noqa: E731
    everything = ["recall_tool_call", "load_older_history", "search_history"]
    by_default = resolve_config(plain, run, specs, has_session=True)  # no configuration needed
    assert names(by_default) == everything and by_default.context.history_tools is True
    assert "load_older_history" in by_default.system_prompt and [t.name for t in by_default.tools] == ["echo"]
    assert by_default.context.loaded_loops() == by_default.context.max_history_loops
    turned_off = resolve_config(off, run, specs, has_session=True)
    assert names(turned_off) == ["recall_tool_call"] and turned_off.context.history_tools is False
    assert turned_off.context.loaded_loops() == turned_off.context.max_run_loops
    without_session = resolve_config(plain, run, specs, has_session=False)
    assert names(without_session) == ["recall_tool_call"] and without_session.context.history_tools is False
    cfg = resolve_config(on, run, specs, has_session=True)
    assert names(cfg) == everything
    assert names(resolve_config(on, run, specs, has_session=False)) == ["recall_tool_call", "search_history"]
    assert on.client_tool_problem([ClientTool(name="search_history")]) is not None


def test_a_fork_rebuilt_from_events_has_the_window_the_machine_had() -> None:
    cfg, hist = with_tools(shown=1, expand=2), history(4)
    user_msgs = [Message(role="user", content="now")]
    log: list[tuple[str, dict[str, Any]]] = []
    s = m.initial_state("r1", "s1")
    steps = [m.Started(T0, cfg, user_msgs), m.ContextLoaded(T0, hist)]
    steps += [m.ModelReplied(T0, Message(role="assistant", tool_calls=[ToolCall(id=f"w{i}", name="load_older_history")]))
              for i in range(2)]  # fmt: skip
    sizes = []
    for ev in steps:
        s, cmds = m.decide(s, ev)
        log += [(c.kind.value, orjson.loads(orjson.dumps(c.payload))) for c in cmds if isinstance(c, m.Emit)]
        if isinstance(ev, m.ModelReplied | m.ContextLoaded):
            sizes.append((len(log), s.context_window_size, s.transcript))
    for seq, size, transcript in sizes:
        got = m.rebuild("r9", s, user_msgs, log[:seq])
        assert got.context_window_size == size and got.transcript == transcript
