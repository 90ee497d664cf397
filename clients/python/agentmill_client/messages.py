"""A run's transcript: messages and the tool calls and results in it (seed: agentloop-runinput-runevent-design)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from agentmill_client import limits
from agentmill_client.base import Model
from agentmill_client.content import IMAGE_PLACEHOLDER, ContentPart, ImagePart, ImageUrl, TextPart

__all__ = ["Message", "ThinkingBlock", "ToolCall", "ToolResult"]


class ToolCall(Model):
    """A call the model asked for. `arguments` is the raw JSON text the model produced.

    ``id`` is agentmill's (``c<modelCallIndex>.<position>``, see worker/machine/identity.py): every
    record, approval, client result, Idempotency-Key and event names the call by it. ``provider_id``
    is the model's own id as sent back to the provider, made unique in the run's transcript; None
    (checkpoints from before) means the provider knows the call by ``id``.
    """

    id: str = Field(min_length=1, max_length=limits.MAX_ID_CHARS * 2)
    provider_id: str | None = Field(default=None, max_length=limits.MAX_ID_CHARS * 2 + 16)
    name: str = Field(min_length=1, max_length=256)
    arguments: str = Field(default="{}", max_length=limits.MAX_MESSAGE_CHARS)


class ThinkingBlock(Model):
    """A block of a model's extended thinking (Anthropic's ``thinking`` with its ``signature``, or
    ``redacted_thinking`` with its encrypted ``data``), kept so it can be sent back unchanged."""

    type: Literal["thinking", "redacted_thinking"]
    thinking: str | None = Field(default=None, max_length=limits.MAX_MESSAGE_CHARS)
    signature: str | None = Field(default=None, max_length=limits.MAX_MESSAGE_CHARS)
    data: str | None = Field(default=None, max_length=limits.MAX_MESSAGE_CHARS)


class Message(Model):
    role: Literal["system", "user", "assistant", "tool"]
    # A string, or (user messages) a list of parts as in OpenAI's chat format: text and images.
    content: str | list[ContentPart] = Field(default="", max_length=limits.MAX_MESSAGE_CHARS)
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    name: str | None = Field(default=None, max_length=256)
    # unix ms, set by the worker from its clock when the message joins a run (a caller's value is replaced)
    created_at: int | None = None
    # An assistant reply's thinking blocks, in order, for providers that need them back (anthropic)
    thinking_blocks: list[ThinkingBlock] | None = Field(default=None, max_length=64)

    @model_validator(mode="after")
    def _role_fields(self) -> Message:
        if self.tool_calls and self.role != "assistant":
            raise ValueError("toolCalls is only allowed on assistant messages")
        if self.role == "tool" and not self.tool_call_id:
            raise ValueError("a tool message needs toolCallId")
        if self.role != "tool" and self.tool_call_id is not None:
            raise ValueError("toolCallId is only allowed on tool messages")
        if self.thinking_blocks and self.role != "assistant":
            raise ValueError("thinkingBlocks is only allowed on assistant messages")
        if isinstance(self.content, list) and self.role != "user":
            raise ValueError("content as a list of parts is only allowed on user messages")
        return self

    @property
    def text(self) -> str:
        """The content as text: parts other than text shown as placeholders (summaries, recall, search)."""
        if isinstance(self.content, str):
            return self.content
        return "\n".join(p.text if isinstance(p, TextPart) else IMAGE_PLACEHOLDER for p in self.content)

    def images(self) -> list[ImageUrl]:
        return (
            [p.image_url for p in self.content if isinstance(p, ImagePart)]
            if isinstance(self.content, list)
            else []
        )


class ToolResult(Model):
    tool_call_id: str
    name: str
    content: str
    is_error: bool = False
    cached: bool | None = None  # served from the tool-result cache (a tool's cache.ttlS in its profile)
