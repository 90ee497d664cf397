"""Chat-completions answerers for the local batch server (tests/support/batch_server.py): a
request's body in, a status and a ``chat.completion`` out."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

__all__ = ["ChatBackend", "chat_completion", "tool_rounds_backend"]

ChatBackend = Callable[[dict[str, Any]], Awaitable[tuple[int, dict[str, Any]]]]


def chat_completion(
    model: str,
    text: str = "",
    tool_calls: list[tuple[str, dict[str, Any]]] | None = None,
    usage: tuple[int, int] = (11, 5),
) -> dict[str, Any]:
    """A chat.completion object (not streamed) with text or tool calls."""
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    if tool_calls:
        message["tool_calls"] = [
            {
                "id": f"call_{i}_{abs(hash((name, orjson.dumps(args)))) % 10**8}",
                "type": "function",
                "function": {"name": name, "arguments": orjson.dumps(args).decode()},
            }
            for i, (name, args) in enumerate(tool_calls)
        ]
    return {
        "id": f"chatcmpl-{time.monotonic_ns()}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {"index": 0, "message": message, "finish_reason": "tool_calls" if tool_calls else "stop"}
        ],
        "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": sum(usage)},
    }


def tool_rounds_backend(tool: str, rounds: int, arguments: dict[str, Any] | None = None) -> ChatBackend:
    """A model that calls ``tool`` once a turn until the conversation holds ``rounds`` tool
    results, then answers ``done after N tool results``: a run of ``rounds + 1`` model calls."""

    async def answer(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        results = sum(1 for m in body.get("messages", []) if m.get("role") == "tool")
        model = str(body.get("model", "m"))
        if results < rounds:
            return 200, chat_completion(model, tool_calls=[(tool, arguments or {"n": results})])
        return 200, chat_completion(model, text=f"done after {results} tool results")

    return answer
