"""Provider ``anthropic``: the Anthropic Messages API (``POST {baseUrl}/v1/messages``), streamed.

The body is worker/models/anthropic_wire.py's, the events are read by anthropic_stream.py; this is
the thin request around them over the worker's shared ``httpx.AsyncClient``. The key (``x-api-key``)
comes from the worker's environment (``apiKeyEnv``) or a file (``apiKeyFile``) and never appears in
events, logs, errors or reprs. HTTP errors map to the retry classes as the openai kind's do
(worker/models/openai.py ``http_error``: 429 with its retry-after, 529 overloaded and 5xx retried,
other 4xx fatal with the provider's message; a too-long prompt is an overflow).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any

import httpx
import orjson

from shared.provider_config import ProviderConfig
from worker.machine import ModelRequest
from worker.models.anthropic_stream import MessageReader
from worker.models.anthropic_wire import request_body
from worker.models.base import Chunk, ModelCallError
from worker.models.openai import http_error, load_key
from worker.models.sse import SseParser
from worker.telemetry import tracing

__all__ = ["ANTHROPIC_VERSION", "AnthropicProvider", "read_events"]

ANTHROPIC_VERSION = "2023-06-01"


def read_events(reader: MessageReader, parser: SseParser, raw: bytes) -> list[Chunk]:
    """The chunks of the next bytes of the stream (split anywhere); ``b""`` at its end."""
    events = parser.feed(raw) if raw else parser.close()
    out: list[Chunk] = []
    for ev in events:
        if ev.event == "ping":
            continue
        out.extend(reader.consume(ev.event, _json(ev.data)))
    return out


class AnthropicProvider:
    def __init__(self, config: ProviderConfig, client: httpx.AsyncClient) -> None:
        if not config.base_url or not config.model:
            raise ValueError("the anthropic provider needs baseUrl and model")
        self.config = config
        self.client = client
        base = config.base_url.rstrip("/")
        self.url = base + ("/messages" if base.endswith("/v1") else "/v1/messages")
        self._key = load_key(config)
        self.timeout = httpx.Timeout(
            connect=config.connect_timeout_s, read=config.read_timeout_s, write=30.0, pool=30.0
        )

    def __repr__(self) -> str:
        return f"AnthropicProvider({self.url!r}, model={self.config.model!r})"

    async def aclose(self) -> None:
        return None  # the HTTP client is the worker's

    async def stream(self, request: ModelRequest, hints: dict[str, Any]) -> AsyncGenerator[Chunk, None]:
        headers = {
            "Accept": "text/event-stream",
            "Content-Type": "application/json",
            "anthropic-version": ANTHROPIC_VERSION,
        }
        if self._key:
            headers["x-api-key"] = self._key
        tracing.inject(headers)
        body = orjson.dumps(request_body(self.config, request))
        reader = MessageReader()
        parser = SseParser()
        try:
            async with self.client.stream(
                "POST", self.url, content=body, headers=headers, timeout=self.timeout
            ) as resp:
                if resp.status_code >= 400:
                    raise http_error(resp.status_code, resp.headers, await resp.aread())
                async for raw in resp.aiter_bytes():
                    for out in read_events(reader, parser, raw):
                        yield out
                for out in read_events(reader, parser, b""):
                    yield out
                yield reader.end()  # a finish reason only if it reached message_stop
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
        except httpx.TransportError as exc:
            raise ModelCallError(
                "connection", f"talking to {self.url} failed: {type(exc).__name__}"
            ) from None


def _json(data: str) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        raise ModelCallError("stream", f"unparseable event: {data[:200]!r}") from None
