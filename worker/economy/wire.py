"""A model call as one request of a provider batch, and the batch's answer read back, per provider
kind. Pure: no I/O.

- ``openai``: a line of the Batch API's input file (``custom_id``, ``method``, ``url``, ``body``),
  the body worker/models/openai.py streams on the standard lane, unstreamed; the answer is a
  ``chat.completion``.
- ``anthropic``: one of Message Batches' ``requests`` (``custom_id``, ``params``), the params
  worker/models/anthropic_wire.py builds for the standard lane (same system, tools and
  ``cache_control`` breakpoints), unstreamed; the answer is a Messages API ``message``, read through
  the standard lane's event reader so that usage (cache reads and writes included), thinking
  blocks and stop reasons mean what they mean there.

A call's id inside agentmill is ``<runId>:<modelCallIndex>``; Anthropic accepts only
``[A-Za-z0-9_-]{1,64}`` as a ``custom_id``, so its requests carry ``wire_custom_id`` (the batch's
record keeps agentmill's ids, from which the adapter maps the results back).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from typing import Any

import orjson

from agentmill_client.models import ThinkingBlock
from shared import endpoint_keys
from shared.provider_config import ProviderConfig
from worker.machine import ModelRequest
from worker.models import anthropic_wire, openai
from worker.models.anthropic_stream import MessageReader
from worker.models.base import StreamEnd, TextDelta, ThinkingDone, ToolCallDelta

__all__ = [
    "BATCH_KINDS",
    "Reply",
    "batch_endpoint",
    "reply_of",
    "request_line",
    "wire_custom_id",
]

BATCH_KINDS = ("openai", "anthropic")  # provider kinds with a batch endpoint spoken here

# (text fragments, tool calls by position, thinking blocks, the end)
Reply = tuple[list[str], dict[int, dict[str, str]], list[ThinkingBlock], StreamEnd]


def batch_endpoint(pcfg: ProviderConfig) -> str:
    """The id of the batch endpoint a provider's economy calls go to (its requests, batches and
    batcher lease are keyed by it): the hash of its base URL, and of its kind but for openai's (one
    server may speak both protocols at one base URL; they are two endpoints)."""
    base = pcfg.base_url or ""
    return endpoint_keys.endpoint_hash(base if pcfg.kind == "openai" else f"{pcfg.kind}:{base}")


_ANTHROPIC_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


def wire_custom_id(cid: str) -> str:
    """``<runId>:<index>`` as Anthropic takes a custom_id: ``<runId>-<index>`` when that is one it
    takes, else ``h-`` and a digest of it (a client's own runId may hold any character)."""
    readable = cid.replace(":", "-")
    if _ANTHROPIC_ID.fullmatch(readable) and not readable.startswith("h-"):
        return readable
    return "h-" + hashlib.sha256(cid.encode()).hexdigest()[:40]


def request_line(pcfg: ProviderConfig, req: ModelRequest, cid: str) -> bytes:
    """The call as its provider's batch request (the provider's own body, never streamed)."""
    if pcfg.kind == "anthropic":
        params = {k: v for k, v in anthropic_wire.request_body(pcfg, req).items() if k != "stream"}
        return orjson.dumps({"custom_id": wire_custom_id(cid), "params": params})
    body = {k: v for k, v in openai.request_body(pcfg, req).items() if k not in ("stream", "stream_options")}
    return orjson.dumps({"custom_id": cid, "method": "POST", "url": "/v1/chat/completions", "body": body})


def reply_of(kind: str, body: dict[str, Any]) -> Reply:
    """A batch's answer read as the stream of it would be on the standard lane."""
    if kind == "anthropic":
        return _message(body)
    return _completion(body)


def _completion(body: dict[str, Any]) -> Reply:
    reader = openai.ChunkReader()
    choice = (body.get("choices") or [{}])[0]
    message = dict(choice.get("message") or {})
    delta: dict[str, Any] = {"content": message.get("content")}
    if message.get("tool_calls"):
        delta["tool_calls"] = [{**c, "index": i} for i, c in enumerate(message["tool_calls"])]
    chunk = {
        "choices": [{"index": 0, "delta": delta, "finish_reason": choice.get("finish_reason")}],
        "usage": body.get("usage"),
    }
    text, calls, thinking = _gather(reader.consume(chunk))
    return text, calls, thinking, reader.end(done=True)


def _message(body: dict[str, Any]) -> Reply:
    """A ``message`` told to MessageReader as the events of its stream."""
    reader = MessageReader()
    chunks = reader.consume(
        "message_start", {"type": "message_start", "message": {"usage": body.get("usage")}}
    )
    for i, block in enumerate(body.get("content") or []):
        kind = block.get("type")
        start: dict[str, Any] = {"type": kind}
        deltas: list[dict[str, Any]] = []
        if kind == "text":
            start["text"] = ""
            deltas.append({"type": "text_delta", "text": block.get("text") or ""})
        elif kind == "tool_use":
            start.update(id=block.get("id"), name=block.get("name"), input={})
            deltas.append(
                {"type": "input_json_delta", "partial_json": orjson.dumps(block.get("input") or {}).decode()}
            )
        elif kind == "thinking":
            start.update(thinking="", signature="")
            deltas.append({"type": "thinking_delta", "thinking": block.get("thinking") or ""})
            deltas.append({"type": "signature_delta", "signature": block.get("signature") or ""})
        elif kind == "redacted_thinking":
            start["data"] = block.get("data") or ""
        chunks += reader.consume(
            "content_block_start", {"type": "content_block_start", "index": i, "content_block": start}
        )
        for d in deltas:
            chunks += reader.consume(
                "content_block_delta", {"type": "content_block_delta", "index": i, "delta": d}
            )
        chunks += reader.consume("content_block_stop", {"type": "content_block_stop", "index": i})
    delta = {
        "type": "message_delta",
        "delta": {"stop_reason": body.get("stop_reason")},
        "usage": body.get("usage"),
    }
    chunks += reader.consume("message_delta", delta)
    chunks += reader.consume("message_stop", {"type": "message_stop"})
    text, calls, thinking = _gather(chunks)
    return text, calls, thinking, reader.end()


def _gather(chunks: Iterable[Any]) -> tuple[list[str], dict[int, dict[str, str]], list[ThinkingBlock]]:
    text: list[str] = []
    calls: dict[int, dict[str, str]] = {}
    thinking: list[ThinkingBlock] = []
    for c in chunks:
        if isinstance(c, TextDelta):
            text.append(c.text)
        elif isinstance(c, ToolCallDelta):
            slot = calls.setdefault(c.index, {"id": "", "name": "", "arguments": ""})
            slot["id"] = slot["id"] or (c.id or "")
            slot["name"] = slot["name"] or (c.name or "")
            slot["arguments"] += c.arguments
        elif isinstance(c, ThinkingDone):
            thinking.append(c.block)
    return text, calls, thinking
