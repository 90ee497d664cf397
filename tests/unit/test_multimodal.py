"""Multimodal input : a user message's content may be text and image parts in
OpenAI's chat format; images are passed through, and shown as placeholders wherever text is made of
a message (compaction summaries, past turns, recall and search)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from agentmill_client.models import Message, RunResult, RunStatus
from shared.provider_config import ProviderConfig
from tests.unit.machine_driver import T0, calling, config, go, text_reply
from worker import machine as m
from worker.core import context, policy, sessions
from worker.models.openai import request_body, wire_message

PIXEL = "data:image/png;base64,iVBORw0KGgo="
PARTS = [{"type": "text", "text": "what is this?"}, {"type": "image_url", "image_url": {"url": PIXEL}}]


def test_parts_validate_as_openai_has_them_and_read_as_text_with_placeholders() -> None:
    msg = Message.model_validate({"role": "user", "content": PARTS})
    assert msg.text == "what is this?\n[image]" and [i.url for i in msg.images()] == [PIXEL]
    assert msg.model_dump(mode="json", by_alias=True, exclude_none=True)["content"] == PARTS
    assert wire_message(msg) == {"role": "user", "content": PARTS}
    assert Message(role="user", content="plain").text == "plain"
    assert (
        policy.estimate_tokens([msg])
        > policy.estimate_tokens([Message(role="user", content="what is this?")]) + 500
    )


@pytest.mark.parametrize(
    ("content", "role", "why"),
    [
        ([{"type": "image_url", "image_url": {"url": "http://a.example/x.png"}}], "user", "https://"),
        ([{"type": "image_url", "image_url": {"url": "ftp://a.example/x.png"}}], "user", "https://"),
        ([{"type": "image_url", "image_url": {"url": "data:text/html;base64,PGI+"}}], "user", "data:image/"),
        ([{"type": "audio", "audio": {}}], "user", "type"),
        (PARTS, "assistant", "only allowed on user messages"),
        ([{"type": "image_url", "image_url": {"url": "https://a.example/" + "x" * 3000}}], "user", "at most"),
    ],
)
def test_what_is_not_an_image_part_is_refused(content: object, role: str, why: str) -> None:
    with pytest.raises(ValidationError, match=why):
        Message.model_validate({"role": role, "content": content})


def test_summaries_past_turns_and_sessions_keep_placeholders_not_image_data() -> None:
    msg = Message.model_validate({"role": "user", "content": PARTS})
    assert "[image]" in context.truncation_summary([msg]) and PIXEL not in context.truncation_summary([msg])
    loop = context.RunLoop(run_id="r", started_at_ms=T0, ended_at_ms=T0, user=msg)
    past = context.reduce_history([loop], config().context, T0)
    assert past[0].content == "what is this?\n[image]"
    s, _ = go(calling(), text_reply("a pixel"))
    s = s.model_copy(update={"session_id": "s1", "transcript": [msg, *s.transcript[1:]]})
    res = RunResult(run_id="r1", status=RunStatus.COMPLETED, final_assistant_message=s.final_message)
    update = sessions.session_update(s, res, {}, T0)
    assert update is not None and PIXEL.encode() not in update.loop and b"[image]" in update.loop


def test_the_first_model_input_carries_the_parts() -> None:
    msg = Message.model_validate({"role": "user", "content": PARTS})
    _, cmds = go(m.initial_state("r1"), m.Started(T0, config(), [msg]), m.ContextLoaded(T0, []))
    req = next(c.request for c in cmds if isinstance(c, m.CallModel))
    assert req.messages[1].images()[0].url == PIXEL


def test_image_parts_placeholder_sends_one_string_for_text_only_models() -> None:
    """``imageParts: "placeholder"``: the provider sends the content as text, each image as
    ``[image]``, never the image data; other messages and the default are unchanged."""
    msg = Message.model_validate({"role": "user", "content": PARTS})
    cfg = ProviderConfig.model_validate({"kind": "openai", "model": "x", "imageParts": "placeholder"})
    req = m.ModelRequest(run_id="r", session_id=None, messages=[Message(role="system", content="s"), msg],
                         tools=[], model_call_index=1, attempt=0, failures=0)  # fmt: skip
    sent = request_body(cfg, req)["messages"]
    assert sent == [{"role": "system", "content": "s"}, {"role": "user", "content": "what is this?\n[image]"}]
    default = request_body(cfg.model_copy(update={"image_parts": "parts"}), req)["messages"]
    assert default[1] == {"role": "user", "content": PARTS}
    with pytest.raises(ValidationError):
        ProviderConfig.model_validate({"kind": "openai", "imageParts": "drop"})


def _estimate_as_defined(messages: list[Message]) -> int:
    """estimate_tokens's definition, message by message, without its string fast path."""
    total = 0
    for msg in messages:
        total += 4 + len(msg.text) // 4 + policy.IMAGE_TOKENS * len(msg.images())
        for c in msg.tool_calls or ():
            total += (len(c.name) + len(c.arguments)) // 4 + 4
    return total


def test_the_token_estimate_counts_every_kind_of_message_as_defined() -> None:
    from agentmill_client.models import ToolCall

    parts = [
        {"type": "text", "text": "look " * 9},
        {"type": "image_url", "image_url": {"url": "https://a.example/x.png"}},
    ]
    messages = [
        Message(role="system", content="be brief " * 7),
        Message(role="user", content=parts),
        Message(role="user", content=[{"type": "text", "text": "only text"}]),
        Message(role="assistant", content="", tool_calls=[ToolCall(id="c1", name="echo", arguments='{"t": "xyz"}')]),
        Message(role="assistant", content="two", tool_calls=[ToolCall(id="c2", name="a", arguments="{}"),
                                                             ToolCall(id="c3", name="bb", arguments="{" + "x" * 99 + "}")]),
        Message(role="tool", content="r" * 203, tool_call_id="c1"),
        Message(role="user", content=""),
    ]  # fmt: skip
    for i in range(len(messages) + 1):
        assert policy.estimate_tokens(messages[:i]) == _estimate_as_defined(messages[:i])
    assert policy.estimate_tokens(messages[1:2]) >= policy.IMAGE_TOKENS  # the image counted
