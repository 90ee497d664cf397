"""A local OpenAI-compatible chat-completions server for tests: scripted, streamed chunk by chunk."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.support.local_app import LocalApp


@dataclass
class Reply:
    """One scripted answer: an error status, or text and/or tool calls streamed in pieces."""

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    error: str = ""
    text: str = ""
    tool_calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # (name, arguments)
    chunk_delay_s: float = 0.02
    pieces: int = 4
    reasoning: str = ""  # streamed as delta.reasoning_content before the text
    finish: str | None = ""  # "" = stop or tool_calls; None = stop streaming without a finish_reason
    ids: list[str] | None = None  # the calls' ids (default: unique ones); a server may repeat them
    usage: tuple[int, int] | None = (
        11,
        5,
    )  # (prompt, completion) tokens of the final usage chunk; None: none sent


class FakeOpenAI(LocalApp):
    """``strict``: refuse a message whose content is not a string, the way llama-cpp-python does.
    ``usage_of``: the (prompt, completion) tokens reported for a request's body, in place of the
    reply's own (a provider whose tokenizer counts otherwise)."""

    def __init__(
        self,
        replies: list[Reply],
        *,
        strict: bool = False,
        usage_of: Callable[[dict[str, Any]], tuple[int, int]] | None = None,
    ) -> None:
        self.replies = replies
        self.strict = strict
        self.usage_of = usage_of
        self.active = 0  # requests being answered now
        self.max_active = 0
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.disconnected = asyncio.Event()
        super().__init__([Route("/v1/chat/completions", self.completions, methods=["POST"])])

    @property
    def base_url(self) -> str:
        return f"{self.origin}/v1"

    async def completions(self, request: Request) -> Response:
        body = orjson.loads(await request.body())
        self.requests.append(body)
        self.headers.append(dict(request.headers))
        if self.strict and any(not isinstance(m.get("content"), str) for m in body["messages"]):
            return JSONResponse({"detail": "content: Input should be a valid string"}, status_code=500)
        reply = self.replies.pop(0) if self.replies else Reply(text="(script exhausted)")
        if reply.status != 200:
            return JSONResponse(
                {"error": {"message": reply.error or "error", "type": "test"}},
                status_code=reply.status,
                headers=reply.headers,
            )
        if self.usage_of is not None:
            reply = dataclasses.replace(reply, usage=self.usage_of(body))
        return StreamingResponse(self._stream(reply, request), media_type="text/event-stream")

    async def _stream(self, reply: Reply, request: Request) -> AsyncIterator[bytes]:
        def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
            return (
                b"data: "
                + orjson.dumps(
                    {
                        "id": "x",
                        "object": "chat.completion.chunk",
                        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
                    }
                )
                + b"\n\n"
            )

        finished = False
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        try:
            yield b": keep-alive\n\n"
            if reply.reasoning:
                yield chunk({"reasoning_content": reply.reasoning})
            text = reply.text
            size = max(1, len(text) // reply.pieces) if text else 1
            for i in range(0, len(text), size):
                await asyncio.sleep(reply.chunk_delay_s)
                yield chunk({"content": text[i : i + size]})
            for idx, (name, args) in enumerate(reply.tool_calls):
                raw = orjson.dumps(args).decode()
                half = len(raw) // 2
                await asyncio.sleep(reply.chunk_delay_s)
                yield chunk(
                    {
                        "tool_calls": [
                            {
                                "index": idx,
                                "id": reply.ids[idx] if reply.ids else f"call_{len(self.requests)}_{idx}",
                                "type": "function",
                                "function": {"name": name, "arguments": raw[:half]},
                            }
                        ]
                    }
                )
                await asyncio.sleep(reply.chunk_delay_s)
                yield chunk({"tool_calls": [{"index": idx, "function": {"arguments": raw[half:]}}]})
            if reply.finish is None:
                finished = True
                return
            yield chunk({}, reply.finish or ("tool_calls" if reply.tool_calls else "stop"))
            if reply.usage is not None:
                prompt, completion = reply.usage
                usage = {"prompt_tokens": prompt, "completion_tokens": completion}
                yield b"data: " + orjson.dumps({"choices": [], "usage": usage}) + b"\n\n"
            yield b"data: [DONE]\n\n"
            finished = True
        finally:
            self.active -= 1
            if not finished:  # the client went away mid-stream (cancelled or closed)
                self.disconnected.set()
