"""The contracts between producers, workers and readers in one import (seed:
agentloop-runinput-runevent-design): the wire models of ``base``, ``messages``, ``inputs`` (what a
caller sends) and ``outputs`` (a run's result and events), re-exported.

Every model serialises to the camelCase JSON of the seed documents. Values are frozen; input
models forbid unknown fields so a typo is an error naming the field, not a silent default.
"""

from __future__ import annotations

from agentmill_client.base import Model
from agentmill_client.content import IMAGE_PLACEHOLDER, ContentPart, ImagePart, ImageUrl, TextPart
from agentmill_client.inputs import (
    ApprovalDecision,
    Budget,
    ClientTool,
    ClientToolResult,
    ConcurrencyKey,
    Debounce,
    JsonSchemaFormat,
    LoopLimits,
    MultitaskStrategy,
    RateKey,
    ResponseFormat,
    RunInput,
    ToolPolicy,
    run_at_ms,
    usable_url,
)
from agentmill_client.messages import Message, ThinkingBlock, ToolCall, ToolResult
from agentmill_client.outputs import EventKind, RunError, RunEvent, RunResult, Usage
from agentmill_client.statuses import RunStatus

__all__ = [
    "IMAGE_PLACEHOLDER",
    "ApprovalDecision",
    "Budget",
    "ClientTool",
    "ClientToolResult",
    "ConcurrencyKey",
    "ContentPart",
    "Debounce",
    "EventKind",
    "ImagePart",
    "ImageUrl",
    "JsonSchemaFormat",
    "LoopLimits",
    "Message",
    "Model",
    "MultitaskStrategy",
    "RateKey",
    "ResponseFormat",
    "RunError",
    "RunEvent",
    "RunInput",
    "RunResult",
    "RunStatus",  # defined in agentmill_client.statuses; part of this contract (RunResult.status)
    "TextPart",
    "ThinkingBlock",
    "ToolCall",
    "ToolPolicy",
    "ToolResult",
    "Usage",
    "run_at_ms",
    "usable_url",
]
