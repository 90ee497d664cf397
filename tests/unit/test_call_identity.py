"""Call identity (worker/machine/identity.py): agentmill names every call by its model-call index and
position; the provider's id is kept for the wire only, unique in the transcript."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from agentmill_client.models import Message, ToolCall
from worker.machine import identify, wire_id

ids = st.sampled_from(["call_0", "call_1", "call_0_2_0", "x", ""])


def reply(*provider_ids: str) -> Message:
    return Message(role="assistant", tool_calls=[ToolCall(id=i or "call_0", name="t") for i in provider_ids])


def test_ids_come_from_the_model_call_and_the_position_not_the_model() -> None:
    out = identify(reply("call_0", "call_0", "abc"), 7, [])
    assert [(c.id, c.provider_id) for c in out.tool_calls or ()] == [
        ("c7.0", "call_0"), ("c7.1", "call_0_7_1"), ("c7.2", "abc")]  # fmt: skip
    assert identify(reply("call_0"), 7, []) == identify(reply("call_0"), 7, [])  # deterministic on resume
    text = Message(role="assistant", content="no calls")
    assert identify(text, 3, []) is text


@given(st.lists(st.lists(ids, min_size=1, max_size=4), min_size=1, max_size=6))
def test_every_call_of_a_run_has_its_own_id_and_its_own_wire_id(rounds: list[list[str]]) -> None:
    """Whatever ids a model invents, over any number of rounds: no two calls share either id."""
    transcript: list[Message] = [Message(role="user", content="go")]
    for n, provider_ids in enumerate(rounds, start=1):
        msg = identify(reply(*provider_ids), n, transcript)
        transcript += [msg, *(Message(role="tool", content="r", tool_call_id=c.id, name=c.name)
                              for c in msg.tool_calls or ())]  # fmt: skip
    calls = [c for m in transcript for c in m.tool_calls or ()]
    assert len({c.id for c in calls}) == len({wire_id(c) for c in calls}) == len(calls)
