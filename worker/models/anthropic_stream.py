"""Anthropic Messages API stream events -> our chunks. Pure: no I/O.

The stream is ``message_start``, then per content block ``content_block_start`` /
``content_block_delta``… / ``content_block_stop``, then ``message_delta`` (stop reason, usage) and
``message_stop``; ``ping`` may come anywhere, ``error`` ends it. A stream that ends before
``message_stop`` reports no finish reason: it is no answer (worker.core.policy.reply_failure).

Stop reasons become the machine's: ``end_turn`` and ``stop_sequence`` -> ``stop``, ``tool_use``
-> ``tool_calls``; ``max_tokens`` and ``refusal`` pass unchanged (worker.core.policy: never a success).

Usage: ``inputTokens`` is every prompt token, cached or not (Anthropic counts ``input_tokens``
apart from ``cache_read_input_tokens`` and ``cache_creation_input_tokens``; agentmill adds them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from agentmill_client.models import ThinkingBlock, Usage
from worker.models.base import (
    Chunk,
    ModelCallError,
    ReasoningDelta,
    StreamEnd,
    TextDelta,
    ThinkingDone,
    ToolCallDelta,
)
from worker.models.openai import MAX_ERROR_CHARS, OVERFLOW_HINTS

__all__ = ["ERROR_STATUS", "STOP_REASONS", "MessageReader", "error_event"]

STOP_REASONS = {"end_turn": "stop", "stop_sequence": "stop", "tool_use": "tool_calls"}
# An error event's type -> the HTTP status the API answers it with (docs: "Errors")
ERROR_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "overloaded_error": 529,
}
MAX_BLOCKS = 1_024  # content blocks one reply may open (a bound on the reader's state)


@dataclass(slots=True)
class _Block:
    type: str
    tool: int = -1  # the tool call's position among the reply's calls
    thinking: list[str] = field(default_factory=list)
    signature: str | None = None
    data: str | None = None


def error_event(err: Any) -> ModelCallError:
    """An ``error`` event (or an error body): by its type, as the HTTP status the API gives it."""
    if not isinstance(err, dict):
        return ModelCallError(
            "stream", f"the provider reported an error mid-stream: {str(err)[:MAX_ERROR_CHARS]}"
        )
    kind = str(err.get("type") or "")
    message = str(err.get("message") or kind or "error")[:MAX_ERROR_CHARS]
    if any(h in f"{kind} {message}".lower() for h in OVERFLOW_HINTS):
        return ModelCallError("overflow", message, status=400)
    status = ERROR_STATUS.get(kind)
    if status is None:
        return ModelCallError("stream", f"the provider reported an error mid-stream: {kind}: {message}")
    return ModelCallError("http", f"HTTP {status} ({kind}): {message}", status=status)


class MessageReader:
    """Reads one reply's events; remembers what the final chunk (``end``) reports."""

    def __init__(self) -> None:
        self.blocks: dict[int, _Block] = {}
        self.tools = 0
        self.last_tool: tuple[str, int] | None = None  # the last call's (id, position)
        self.stop_reason: str | None = None
        self.stopped = False  # message_stop came
        self.usage: dict[str, int] = {}

    def consume(self, event: str, obj: Any) -> list[Chunk]:
        if event == "ping":
            return []
        if event == "error" or (isinstance(obj, dict) and obj.get("type") == "error"):
            raise error_event(obj.get("error") if isinstance(obj, dict) else obj)
        if not isinstance(obj, dict):
            return []
        kind = obj.get("type")
        if kind == "message_start":
            self._usage((obj.get("message") or {}).get("usage"))
        elif kind == "content_block_start":
            return self._start(int(obj.get("index") or 0), obj.get("content_block") or {})
        elif kind == "content_block_delta":
            return self._delta(int(obj.get("index") or 0), obj.get("delta") or {})
        elif kind == "content_block_stop":
            return self._stop(int(obj.get("index") or 0))
        elif kind == "message_delta":
            reason = (obj.get("delta") or {}).get("stop_reason")
            if reason:
                self.stop_reason = str(reason)
            self._usage(obj.get("usage"))
        elif kind == "message_stop":
            self.stopped = True
        return []

    def end(self) -> StreamEnd:
        """What the stream said: a finish reason only when it reached ``message_stop``."""
        reason = None
        if self.stopped:
            reason = STOP_REASONS.get(self.stop_reason or "end_turn", self.stop_reason)
        return StreamEnd(finish_reason=reason, usage=self._as_usage(), done=self.stopped)

    # ---- blocks ----

    def _start(self, index: int, block: dict[str, Any]) -> list[Chunk]:
        if index not in self.blocks and len(self.blocks) >= MAX_BLOCKS:
            raise ModelCallError("stream", f"the reply opened more than {MAX_BLOCKS} content blocks")
        b = self.blocks[index] = _Block(type=str(block.get("type") or ""))
        if b.type == "text" and block.get("text"):
            return [TextDelta(str(block["text"]))]
        if b.type == "thinking":
            b.signature = block.get("signature") or None
            if block.get("thinking"):
                b.thinking.append(str(block["thinking"]))
                return [ReasoningDelta(str(block["thinking"]))]
        if b.type == "redacted_thinking":
            b.data = str(block.get("data") or "")
        if b.type == "tool_use":
            call_id = str(block.get("id") or "")
            if call_id and self.last_tool is not None and self.last_tool[0] == call_id:
                # A block that repeats the previous call's id continues that call: LiteLLM's
                # proxy opens a block per fragment of a server that repeats the id on every
                # chunk (llama-cpp-python). The API itself never repeats an id in a reply.
                b.tool = self.last_tool[1]
            else:
                b.tool, self.tools = self.tools, self.tools + 1
                self.last_tool = (call_id, b.tool)
            given = block.get("input")
            # The input comes as input_json_delta fragments; a start that carries it whole (some
            # proxies) gives it here, unless it is the empty object the API always puts there.
            args = _dumps(given) if isinstance(given, dict) and given else ""
            return [ToolCallDelta(index=b.tool, id=str(block.get("id") or "") or None,
                                  name=str(block.get("name") or "") or None, arguments=args)]  # fmt: skip
        return []

    def _delta(self, index: int, delta: dict[str, Any]) -> list[Chunk]:
        b = self.blocks.get(index)
        if b is None:
            raise ModelCallError("stream", f"a delta for content block {index}, which never started")
        kind = delta.get("type")
        if kind == "text_delta" and b.type == "text":
            text = str(delta.get("text") or "")
            return [TextDelta(text)] if text else []
        if kind == "input_json_delta" and b.type == "tool_use":
            part = str(delta.get("partial_json") or "")
            return [ToolCallDelta(index=b.tool, arguments=part)] if part else []
        if kind == "thinking_delta" and b.type == "thinking":
            text = str(delta.get("thinking") or "")
            b.thinking.append(text)
            return [ReasoningDelta(text)] if text else []
        if kind == "signature_delta" and b.type == "thinking":
            b.signature = str(delta.get("signature") or "")
        return []

    def _stop(self, index: int) -> list[Chunk]:
        b = self.blocks.get(index)
        if b is None:
            return []
        if b.type == "thinking":
            block = ThinkingBlock(type="thinking", thinking="".join(b.thinking), signature=b.signature)
            return [ThinkingDone(block)]
        if b.type == "redacted_thinking":
            return [ThinkingDone(ThinkingBlock(type="redacted_thinking", data=b.data))]
        return []

    # ---- usage ----

    def _usage(self, u: Any) -> None:
        """message_start's usage, then message_delta's: cumulative counts, each overwriting; a
        count a delta leaves out (or null) keeps its earlier value."""
        if not isinstance(u, dict):
            return
        for key in (
            "input_tokens",
            "output_tokens",
            "cache_read_input_tokens",
            "cache_creation_input_tokens",
        ):
            v = u.get(key)
            if isinstance(v, int) and not isinstance(v, bool):
                self.usage[key] = max(0, v)

    def _as_usage(self) -> Usage | None:
        """None when nothing was counted: a prompt is never 0 tokens, so all zeros is a proxy that
        had no count from its server (LiteLLM in front of llama-cpp-python); agentmill estimates."""
        if not any(self.usage.values()):
            return None
        read = self.usage.get("cache_read_input_tokens", 0)
        write = self.usage.get("cache_creation_input_tokens", 0)
        return Usage(
            input_tokens=self.usage.get("input_tokens", 0) + read + write,
            output_tokens=self.usage.get("output_tokens", 0),
            cache_read_tokens=read,
            cache_write_tokens=write,
        )


def _dumps(value: Any) -> str:
    return orjson.dumps(value).decode()
