"""A model call's reply assembled from its fragments (worker/runner/reply.py): a reply of text is
the message validating it makes, without validating it; one over its bound is refused as before."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from agentmill_client import limits
from agentmill_client.models import Message, ThinkingBlock
from worker.machine import ModelRequest
from worker.runner.reply import assemble

REQ = ModelRequest(run_id="r1", session_id=None, messages=[Message(role="user", content="x")], tools=[],
                   model_call_index=1, attempt=0, failures=0)  # fmt: skip


@pytest.mark.parametrize("text", [[], ["hi"], ["h", "é", "llo"], ["x" * limits.MAX_MESSAGE_CHARS]])
def test_a_reply_of_text_is_the_message_validating_it_makes(
    text: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    want = Message(role="assistant", content="".join(text), tool_calls=None, thinking_blocks=None)

    def refused(*_: Any, **__: Any) -> None:
        raise AssertionError("validated")

    monkeypatch.setattr(Message, "__init__", refused)
    got = assemble(REQ, text, {})
    assert got == want and repr(got) == repr(want)
    assert got.model_fields_set == want.model_fields_set
    assert got.model_dump_json(by_alias=True) == want.model_dump_json(by_alias=True)


def test_a_reply_over_its_bound_is_refused() -> None:
    with pytest.raises(ValidationError):
        assemble(REQ, ["x" * limits.MAX_MESSAGE_CHARS, "y"], {})


def test_replies_with_calls_or_thinking_are_validated() -> None:
    got = assemble(REQ, ["a"], {0: {"id": "p1", "name": "echo", "arguments": "{}"}})
    assert got.tool_calls is not None and got.tool_calls[0].provider_id == "p1"
    block = ThinkingBlock(type="thinking", thinking="hm", signature="s")
    assert assemble(REQ, ["a"], {}, [block]).thinking_blocks == [block]
    with pytest.raises(ValidationError):
        assemble(REQ, ["a"], {0: {"id": "p1", "name": "n" * 300, "arguments": "{}"}})
