"""The model-provider port: a provider streams chunks for a ModelRequest or raises ModelCallError.

Providers do I/O; the assembling of chunks into a message and every decision about failures
happen elsewhere (worker/runner/model_call.py, worker/core/policy.py).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Protocol

from agentmill_client.models import ThinkingBlock, Usage
from worker.core.policy import FailureKind, ModelFailure
from worker.machine import ModelRequest

__all__ = [
    "Chunk",
    "ModelCallError",
    "ModelProvider",
    "ReasoningDelta",
    "StreamEnd",
    "TextDelta",
    "ThinkingDone",
    "ToolCallDelta",
]


@dataclass(frozen=True, slots=True)
class TextDelta:
    text: str


@dataclass(frozen=True, slots=True)
class ReasoningDelta:
    """Thinking text some servers stream apart from the answer (``reasoning_content``, ``reasoning``)."""

    text: str


@dataclass(frozen=True, slots=True)
class ToolCallDelta:
    """A fragment of tool call number ``index``; id and name usually come in the first fragment."""

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""


@dataclass(frozen=True, slots=True)
class ThinkingDone:
    """A complete thinking block (anthropic), kept on the reply to be sent back unchanged."""

    block: ThinkingBlock


@dataclass(frozen=True, slots=True)
class StreamEnd:
    """What the stream said at its end. ``finish_reason`` None: it stopped without one (the
    machine decides what that means, see worker.core.policy.reply_failure); ``done``: it sent [DONE]."""

    finish_reason: str | None = None
    usage: Usage | None = None
    done: bool = False


Chunk = TextDelta | ReasoningDelta | ToolCallDelta | ThinkingDone | StreamEnd


class ModelCallError(Exception):
    """A failed model call, classified by worker.core.policy.classify via ``failure``."""

    def __init__(
        self, kind: FailureKind, message: str, *, status: int | None = None, retry_after_ms: int | None = None
    ) -> None:
        super().__init__(message)
        self.failure = ModelFailure(kind=kind, message=message, status=status, retry_after_ms=retry_after_ms)


class ModelProvider(Protocol):
    def stream(self, request: ModelRequest, hints: dict[str, object]) -> AsyncGenerator[Chunk, None]:
        """Open the call and yield its chunks. Raises ModelCallError; cancellation closes the stream."""
        ...

    async def aclose(self) -> None: ...
