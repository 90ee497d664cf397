"""A message in its event (worker/machine/handlers.py ``message_form``) is its JSON dump; a message
of text is read off its fields, no serializer walked."""

from __future__ import annotations

from typing import Any

import pytest

from agentmill_client.models import Message, ThinkingBlock, ToolCall
from worker.machine.handlers import message_form

TEXT = [
    Message(role="assistant", content="hi", created_at=5),
    Message(role="assistant", content=""),
    Message(role="user", content='é \\u2028 "q"', name="ann", created_at=0),
    Message(role="tool", content="42", tool_call_id="c1.0", name="calc", created_at=7),
    Message(role="assistant", content="x", tool_calls=None, thinking_blocks=None),
]
OTHERS = [
    Message(role="assistant", content="", tool_calls=[ToolCall(id="c1.0", name="calc", arguments="{}")]),
    Message(role="assistant", content="a", thinking_blocks=[ThinkingBlock(type="thinking", thinking="t")]),
    Message(role="user", content=[{"type": "text", "text": "parts"}]),  # type: ignore[list-item]
]


@pytest.mark.parametrize("m", TEXT + OTHERS)
def test_the_form_is_the_json_dump(m: Message) -> None:
    want = m.model_dump(mode="json", by_alias=True, exclude_none=True)
    got = message_form(m)
    assert got == want and list(got) == list(want)


@pytest.mark.parametrize("m", TEXT)
def test_a_message_of_text_is_read_off_its_fields(m: Message, monkeypatch: pytest.MonkeyPatch) -> None:
    want = message_form(m)

    def refused(*_: Any, **__: Any) -> None:
        raise AssertionError("serialised")

    monkeypatch.setattr(Message, "model_dump", refused)
    assert message_form(m) == want


def test_message_fields_are_the_ones_the_form_reads() -> None:
    """Its fields in this order, the tail's JSON values as they are (str and int, or None)."""
    assert list(Message.model_fields) == [
        "role", "content", "tool_calls", "tool_call_id", "name", "created_at", "thinking_blocks",
    ]  # fmt: skip
    assert not Message.__pydantic_decorators__.field_serializers
    assert not Message.__pydantic_decorators__.model_serializers
