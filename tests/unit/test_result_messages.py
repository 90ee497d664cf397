"""includeMessages: the final transcript in result.messages, bounded by count and bytes."""

from __future__ import annotations

import pytest

from agentmill_client import limits
from agentmill_client.models import Message
from tests.unit.machine_driver import calling, calls_reply, config, go, result, text_reply
from worker import machine as m
from worker.machine.steps import bounded_messages


def test_a_run_asked_for_its_messages_ends_with_its_whole_transcript() -> None:
    s, _ = go(calling(config(include_messages=True)), calls_reply(("a", "echo", "{}")), result("a", "seen"))
    s, _ = go(s, text_reply("the answer"))
    res = m.result_of(s)
    assert res.messages is not None and res.messages_omitted == 0
    assert [(x.role, x.content) for x in res.messages] == [
        ("user", "hi"), ("assistant", ""), ("tool", "seen"), ("assistant", "the answer")
    ]  # fmt: skip
    assert res.messages[1].tool_calls is not None and res.messages[1].tool_calls[0].id == "a"


def test_without_include_messages_the_result_has_none() -> None:
    s, _ = go(calling(), text_reply("x"))
    assert m.result_of(s).messages is None and m.result_of(s).messages_omitted is None


def test_the_transcript_is_cut_to_its_newest_messages_by_count_and_by_bytes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    msgs = [Message(role="user", content=f"m{i}" + "x" * 98) for i in range(10)]
    monkeypatch.setattr(limits, "MAX_RESULT_MESSAGES", 4)
    kept, omitted = bounded_messages(msgs)
    assert [k.content[:2] for k in kept] == ["m6", "m7", "m8", "m9"] and omitted == 6
    monkeypatch.setattr(limits, "MAX_RESULT_MESSAGES", 500)
    monkeypatch.setattr(limits, "MAX_RESULT_MESSAGES_BYTES", 3 * 140)  # each is about 130 bytes of JSON
    kept, omitted = bounded_messages(msgs)
    assert [k.content[:2] for k in kept] == ["m7", "m8", "m9"] and omitted == 7
