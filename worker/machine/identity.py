"""Call identity: agentmill names every tool call itself; the model's own id is only for the wire.

A model's tool-call ids are untrusted input: servers differ (some count from ``call_0`` in every
reply, some repeat an id inside one reply, some send none). So each call's id is derived from where
it stands, the run's model-call index and its position in that reply (``c3.0``, ``c3.1``): unique in
the run, and the same when a resumed run gets the same reply again from its checkpoint, so tool
records, approvals, client results, Idempotency-Keys and events all key on it. The provider's id is
kept as ``provider_id`` for what goes back to the provider (the assistant's tool_calls and the tool
messages), made unique in the transcript when it repeats, so every call is answered exactly once.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from agentmill_client.models import Message, ToolCall

__all__ = ["call_id", "child_run_id", "identify", "wire_id"]


def call_id(model_call_index: int, position: int) -> str:
    """agentmill's id of the call at ``position`` of the reply to model call ``model_call_index``."""
    return f"c{model_call_index}.{position}"


def child_run_id(run_id: str, tool_call_id: str) -> str:
    """The id of the child run a sub-agent call starts: from the parent's id (the one its keys use)
    and the call's, so the call made again (a resumed parent) finds the same child."""
    return "sub_" + hashlib.sha256(f"{run_id}\0{tool_call_id}".encode()).hexdigest()[:32]


def wire_id(call: ToolCall) -> str:
    """The id the provider knows the call by."""
    return call.provider_id or call.id


def identify(reply: Message, model_call_index: int, earlier: Iterable[Message]) -> Message:
    """The reply with agentmill's ids; ``reply``'s calls carry the provider's ids in ``id``.

    ``earlier``: the messages before it (the model's input); a provider id already used there, or
    earlier in the same reply, gets a suffix on the wire."""
    if not reply.tool_calls:
        return reply
    taken = {wire_id(c) for m in earlier for c in m.tool_calls or ()}
    taken |= {m.tool_call_id for m in earlier if m.tool_call_id}
    calls = []
    for pos, c in enumerate(reply.tool_calls):
        wire = c.id
        if wire in taken:
            wire = base = f"{c.id}_{model_call_index}_{pos}"
            n = 1
            while wire in taken:
                n += 1
                wire = f"{base}_{n}"
        taken.add(wire)
        calls.append(ToolCall(id=call_id(model_call_index, pos), provider_id=wire, name=c.name,
                              arguments=c.arguments))  # fmt: skip
    return reply.model_copy(update={"tool_calls": calls})
