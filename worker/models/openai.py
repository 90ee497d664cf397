"""Provider ``openai``: any OpenAI-compatible chat-completions server, streamed.

The wire mapping (request body, chunk -> our chunks, error -> ModelCallError) is pure functions;
``OpenAIProvider.stream`` is the thin request around them, over the worker's one shared
``httpx.AsyncClient``. The API key never appears in events, logs, errors or reprs.
"""

from __future__ import annotations

import email.utils
import os
import re
import time
from collections.abc import AsyncGenerator, Mapping
from pathlib import Path
from typing import Any

import httpx
import orjson

from agentmill_client.models import Message, ResponseFormat, Usage
from shared.provider_config import ProviderConfig
from worker.core.config import ToolSpec
from worker.machine import ModelRequest, wire_id
from worker.models.base import (
    Chunk,
    ModelCallError,
    ReasoningDelta,
    StreamEnd,
    TextDelta,
    ToolCallDelta,
)
from worker.models.shapes import REFUSAL_STATUSES, ShapeMemory, adapt, refused_shape
from worker.models.sse import SseParser
from worker.telemetry import tracing

__all__ = [
    "MAX_ERROR_CHARS",
    "OVERFLOW_HINTS",
    "VALIDATION_HINT",
    "ChunkReader",
    "OpenAIProvider",
    "http_error",
    "load_key",
    "request_body",
    "retry_after_ms",
    "stream_error",
    "wire_message",
    "wire_response_format",
    "wire_tool",
]


OVERFLOW_HINTS = (
    "context_length_exceeded",
    "maximum context length",
    "context length",
    "too many tokens",
    "prompt is too long",
)


VALIDATION_HINT = re.compile(r"^\d+ validation errors?:")  # pydantic's summary line
MAX_ERROR_CHARS = 2_000  # enough for a validation error to name the field


# ---- pure wire mapping ----


def wire_message(
    m: Message, wire_ids: Mapping[str, str] | None = None, image_parts: str = "parts"
) -> dict[str, Any]:
    """Every ``content`` is a string, never null: an assistant tool-call message with no text sends
    ``""``. OpenAI, vLLM, llama.cpp's llama-server, Ollama and LiteLLM take ``""``; llama-cpp-python's
    server rejects null (HTTP 500, "Input should be a valid string").

    Calls go out under the provider's ids (``wire_id``); a tool message names its call by
    agentmill's id, mapped back with ``wire_ids`` (agentmill id → provider id, from the request).

    A list of text and image parts goes out as that list, or (``image_parts="placeholder"``, for
    text-only models) as one string with each image shown as ``[image]``."""
    if m.role == "tool":
        call = m.tool_call_id or ""
        return {"role": "tool", "tool_call_id": (wire_ids or {}).get(call, call), "content": m.content}
    if m.role == "assistant" and m.tool_calls:
        return {
            "role": "assistant",
            "content": m.content,
            "tool_calls": [
                {"id": wire_id(c), "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in m.tool_calls
            ],
        }
    if isinstance(m.content, list) and image_parts == "placeholder":
        return {"role": m.role, "content": m.text}
    if isinstance(m.content, list):  # text and image parts, as OpenAI's chat format has them
        return {
            "role": m.role,
            "content": [p.model_dump(mode="json", by_alias=True, exclude_none=True) for p in m.content],
        }
    return {"role": m.role, "content": m.content}


def wire_tool(t: ToolSpec) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
    }


def wire_response_format(fmt: ResponseFormat, style: str = "openai") -> dict[str, Any]:
    """The request's ``response_format``: OpenAI's ``json_schema`` shape, or (style
    ``json_object_schema``) ``{"type": "json_object", "schema": …}``, the shape llama-cpp-python's
    server turns into a grammar (it refuses ``json_schema``)."""
    if fmt.json_schema is None:
        return {"type": "json_object"}
    js = fmt.json_schema
    if style == "json_object_schema":
        return {"type": "json_object", "schema": js.schema_}
    spec: dict[str, Any] = {"name": js.name, "schema": js.schema_}
    if js.description is not None:
        spec["description"] = js.description
    if js.strict is not None:
        spec["strict"] = js.strict
    return {"type": "json_schema", "json_schema": spec}


def request_body(cfg: ProviderConfig, req: ModelRequest) -> dict[str, Any]:
    ids = {c.id: wire_id(c) for m in req.messages for c in m.tool_calls or ()}
    body: dict[str, Any] = {
        "model": cfg.model,
        "messages": [wire_message(m, ids, cfg.image_parts) for m in req.messages],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if req.tools:
        body["tools"] = [wire_tool(t) for t in req.tools]
        if cfg.tool_choice:
            body["tool_choice"] = cfg.tool_choice
    if req.response_format is not None and cfg.response_format_style != "none":
        body["response_format"] = wire_response_format(req.response_format, cfg.response_format_style)
    if cfg.temperature is not None:
        body["temperature"] = cfg.temperature
    if cfg.max_tokens is not None:
        body["max_tokens"] = cfg.max_tokens
    if cfg.prompt_cache_key:  # one cache key for a session's (else a run's) calls
        body["prompt_cache_key"] = req.session_id or req.run_id
    body.update(cfg.extra_body)
    return body


class ChunkReader:
    """Turns decoded stream chunks into our chunks; remembers finish reason and usage.

    It only reports what the stream said; whether a stream that stopped without a finish_reason
    is an answer is decided by the machine (worker.core.policy.reply_failure).
    """

    def __init__(self) -> None:
        self.finish_reason: str | None = None
        self.usage: Usage | None = None

    def consume(self, obj: Any) -> list[Chunk]:
        if not isinstance(obj, dict):
            return []
        if obj.get("error"):
            raise stream_error(obj["error"])
        out: list[Chunk] = []
        for choice in obj.get("choices") or []:
            delta = choice.get("delta") or choice.get("message") or {}
            thought = delta.get("reasoning_content") or delta.get("reasoning")
            if isinstance(thought, str) and thought:
                out.append(ReasoningDelta(thought))
            text = delta.get("content")
            if text:
                out.append(TextDelta(text))
            for tc in delta.get("tool_calls") or []:
                fn = tc.get("function") or {}
                out.append(ToolCallDelta(index=int(tc.get("index") or 0), id=tc.get("id") or None,
                                         name=fn.get("name") or None, arguments=fn.get("arguments") or ""))  # fmt: skip
            fc = delta.get("function_call")
            if fc and not delta.get("tool_calls"):  # the legacy single-call field
                out.append(
                    ToolCallDelta(
                        index=0, id=None, name=fc.get("name") or None, arguments=fc.get("arguments") or ""
                    )
                )
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]
        usage = obj.get("usage")
        if isinstance(usage, dict):
            details = usage.get("prompt_tokens_details")
            cached = details.get("cached_tokens") if isinstance(details, dict) else None
            self.usage = Usage(
                input_tokens=int(usage.get("prompt_tokens") or 0),  # cached ones included
                output_tokens=int(usage.get("completion_tokens") or 0),
                cache_read_tokens=int(cached or 0),
            )
        return out

    def end(self, *, done: bool) -> StreamEnd:
        return StreamEnd(finish_reason=self.finish_reason, usage=self.usage, done=done)


def _message_of(err: Any) -> tuple[str, str]:
    if isinstance(err, dict):
        return str(err.get("message") or err)[:MAX_ERROR_CHARS], str(err.get("code") or err.get("type") or "")
    return str(err)[:MAX_ERROR_CHARS], ""


def _is_overflow(message: str, code: str) -> bool:
    text = f"{code} {message}".lower()
    return any(h in text for h in OVERFLOW_HINTS)


def stream_error(err: Any) -> ModelCallError:
    """A ``data: {"error": …}`` in the middle of a stream."""
    message, code = _message_of(err)
    if _is_overflow(message, code):
        return ModelCallError("overflow", message)
    status = err.get("status") if isinstance(err, dict) else None
    if isinstance(status, int):
        return ModelCallError("http", message, status=status)
    return ModelCallError("stream", f"the provider reported an error mid-stream: {message}")


def retry_after_ms(headers: httpx.Headers, now: float | None = None) -> int | None:
    if (ms := headers.get("retry-after-ms")) is not None:
        try:
            return max(0, int(float(ms)))
        except ValueError:
            pass
    ra = headers.get("retry-after")
    if ra is None:
        return None
    try:
        return max(0, int(float(ra) * 1000))
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(ra).timestamp()
        except (TypeError, ValueError):
            return None
        return max(0, int((when - (now or time.time())) * 1000))


def http_error(status: int, headers: httpx.Headers, raw: bytes) -> ModelCallError:
    try:
        message, code = _message_of(orjson.loads(raw).get("error"))
    except (orjson.JSONDecodeError, AttributeError):
        message, code = raw.decode("utf-8", errors="replace")[:MAX_ERROR_CHARS], ""
    message = message or f"HTTP {status}"
    if status in (400, 413) and _is_overflow(message, code):
        return ModelCallError("overflow", message, status=status)
    if status == 500 and VALIDATION_HINT.search(message):
        # llama-cpp-python answers a request body it cannot validate with 500, not 422.
        return ModelCallError(
            "invalid", f"HTTP {status}: the server refused the request: {message}", status=status
        )
    return ModelCallError(
        "http", f"HTTP {status}: {message}", status=status, retry_after_ms=retry_after_ms(headers)
    )


# ---- the request ----


def load_key(cfg: ProviderConfig) -> str:
    if cfg.api_key_env:
        return os.environ.get(cfg.api_key_env, "")
    if cfg.api_key_file:
        return Path(cfg.api_key_file).read_text().strip()
    return ""


class OpenAIProvider:
    """``shapes``: what the worker's providers learnt of endpoints that refuse a request shape
    (worker/models/shapes.py); None: a refusal fails the call as it is."""

    def __init__(
        self, config: ProviderConfig, client: httpx.AsyncClient, shapes: ShapeMemory | None = None
    ) -> None:
        if not config.base_url or not config.model:
            raise ValueError("the openai provider needs baseUrl and model")
        self.config = config
        self.client = client
        self.url = config.base_url.rstrip("/") + "/chat/completions"
        self._key = load_key(config)
        self.timeout = httpx.Timeout(
            connect=config.connect_timeout_s, read=config.read_timeout_s, write=30.0, pool=30.0
        )
        self.shapes = shapes
        # The shapes the profile set itself: its setting holds, no refusal changes it.
        chosen = config.model_fields_set
        self.keep = frozenset(
            shape
            for shape, setting in (
                ("response_format", "response_format_style"),
                ("content_parts", "image_parts"),
            )
            if setting in chosen
        )

    def __repr__(self) -> str:
        return f"OpenAIProvider({self.url!r}, model={self.config.model!r})"

    async def aclose(self) -> None:
        return None  # the HTTP client is the worker's

    def _refused(self, status: int, raw: bytes, sent: dict[str, Any], known: frozenset[str]) -> str | None:
        """The shape of ``sent`` the error refuses, if its alternative is still to be tried."""
        if self.shapes is None or status not in REFUSAL_STATUSES:
            return None
        shape = refused_shape(status, raw.decode("utf-8", errors="replace")[:MAX_ERROR_CHARS], sent)
        return shape if shape is not None and shape not in known and shape not in self.keep else None

    async def stream(self, request: ModelRequest, hints: dict[str, Any]) -> AsyncGenerator[Chunk, None]:
        headers = {"Accept": "text/event-stream", "Content-Type": "application/json"}
        if self._key:
            headers["Authorization"] = f"Bearer {self._key}"
        tracing.inject(headers)  # the call's traceparent, when traces are on
        body = request_body(self.config, request)
        known = self.shapes.of(self.url) if self.shapes is not None else frozenset()
        sent = adapt(body, known, keep=self.keep)
        learnt: list[tuple[str, str]] = []  # shapes refused by this call whose alternative is being tried
        reader = ChunkReader()
        parser = SseParser()
        try:
            while True:
                async with self.client.stream(
                    "POST", self.url, content=orjson.dumps(sent), headers=headers, timeout=self.timeout
                ) as resp:
                    if resp.status_code >= 400:
                        raw = await resp.aread()
                        if (shape := self._refused(resp.status_code, raw, sent, known)) is not None:
                            known = known | {shape}
                            sent = adapt(body, known, keep=self.keep)
                            learnt.append((shape, f"HTTP {resp.status_code}"))
                            continue  # once more, in the alternative
                        raise http_error(resp.status_code, resp.headers, raw)
                    if self.shapes is not None:
                        for shape, detail in learnt:  # the alternative was taken
                            self.shapes.learn(self.url, shape, detail)
                    async for raw_bytes in resp.aiter_bytes():
                        for ev in parser.feed(raw_bytes):
                            if ev.data.strip() == "[DONE]":
                                if (
                                    reader.finish_reason is None
                                    and self.shapes
                                    and not self.config.max_concurrent
                                ):
                                    self.shapes.interrupted(self.url)
                                yield reader.end(done=True)
                                return
                            for out in reader.consume(_json(ev.data)):
                                yield out
                    for ev in parser.close():
                        if ev.data.strip() != "[DONE]":
                            for out in reader.consume(_json(ev.data)):
                                yield out
                    yield reader.end(done=False)  # complete if it sent a finish_reason
                    return
        except httpx.TimeoutException as exc:
            raise ModelCallError("timeout", f"{type(exc).__name__} talking to {self.url}") from None
        except httpx.ConnectError as exc:
            raise ModelCallError(
                "connection", f"cannot connect to {self.url}: {type(exc).__name__}"
            ) from None
        except (httpx.RemoteProtocolError, httpx.ReadError) as exc:
            raise ModelCallError(
                "stream", f"the stream from {self.url} broke: {type(exc).__name__}"
            ) from None
        except httpx.TransportError as exc:  # write errors, closed connections, proxy errors …
            raise ModelCallError(
                "connection", f"talking to {self.url} failed: {type(exc).__name__}"
            ) from None


def _json(data: str) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        raise ModelCallError("stream", f"unparseable chunk: {data[:200]!r}") from None
