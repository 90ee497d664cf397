"""A model call's reply assembled from its fragments (a stream's, or a batch answer's read as one)."""

from __future__ import annotations

from agentmill_client import limits
from agentmill_client.models import Message, ThinkingBlock, ToolCall
from shared.model_copies import built
from worker.machine import ModelRequest, identify

__all__ = ["assemble"]


def assemble(
    req: ModelRequest,
    text: list[str],
    calls: dict[int, dict[str, str]],
    thinking: list[ThinkingBlock] | None = None,
) -> Message:
    """The reply from its fragments, its calls named by agentmill (``identify``: the provider's ids
    are kept for the wire only); raises ValidationError when a part is over its bound."""
    content = "".join(text)
    if not calls and not thinking and len(content) <= limits.MAX_MESSAGE_CHARS:
        # A reply of text within the one bound it has: the message validating it would make (the
        # most common reply; validating it was a cold walk of Message's validator at every reply).
        reply: Message = built(
            Message, role="assistant", content=content, tool_calls=None, thinking_blocks=None
        )
        return reply
    tool_calls = [
        ToolCall(
            id=c["id"] or f"call_{req.model_call_index}_{i}",
            name=c["name"] or "unknown",
            arguments=c["arguments"] or "{}",
        )
        for i, c in sorted(calls.items())
    ]
    reply = Message(role="assistant", content=content, tool_calls=tool_calls or None,
                    thinking_blocks=thinking or None)  # fmt: skip
    return identify(reply, req.model_call_index, req.messages)
