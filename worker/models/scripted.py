"""A deterministic model for the demo, tests and bench, selected by a profile (provider.kind=scripted).

Mode ``script`` follows a list of turns (``runtimeHints.script`` of the run, else the profile's):
``{"text": "…"}``, ``{"json": value}`` (answers with the value as JSON text: a structured answer),
``{"toolCalls": [{"name": "…", "arguments": {…}}]}`` (or ``"rawArguments": "…"``
for invalid JSON; ``"id"``: the provider's id for the call, which may repeat, as some servers' do:
agentmill names the call itself), ``{"error": {"status": 503, "message": "…"}}`` (``"kind"`` may be connection,
timeout or overflow; ``"afterChunks"`` fails mid-stream; ``"retryAfterMs"``), ``{"stall": true}``, ``{"echoContext": true}`` (answers with the messages and tool names it was given, as JSON);
each with an optional ``"delayMs"`` over which text is streamed, ``"reasoning": "…"`` streamed
before it, and ``"finishReason"`` (null: the stream stops without one). The turn answering a call is
number ``iterations + failures`` of the run, so retries and crash-resumes replay the same script.
When the script runs out the model answers with a final text.

With ``reportCache`` its usage reports prompt caching as Anthropic's does with a breakpoint on the
last message: the previous call's prompt (everything before the newest assistant message) is read
from the cache, the rest written to it, a prompt under MIN_CACHE_TOKENS neither (both parts of the
input tokens, which count the whole prompt).

Mode ``calculator`` is the demo agent: it asks the calculator tool to evaluate the arithmetic in
the last user message, then answers with the result.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncGenerator
from typing import Any

import orjson

from agentmill_client import limits
from agentmill_client.models import Message, Usage
from shared.provider_config import ProviderConfig
from worker.core import policy, preamble
from worker.machine import ModelRequest
from worker.models.base import Chunk, ModelCallError, ReasoningDelta, StreamEnd, TextDelta, ToolCallDelta

__all__ = [
    "FINAL_TEXT",
    "MIN_CACHE_TOKENS",
    "ScriptError",
    "ScriptedProvider",
    "cache_usage",
    "calculator_turn",
]

MIN_CACHE_TOKENS = 1024  # Anthropic's shortest cacheable prompt (Sonnet, Opus)


FINAL_TEXT = "Done."
_EXPR = re.compile(r"[-+*/%().\d\s]{3,}")


class ScriptError(ValueError):
    """The run's script is malformed (the run fails with this message)."""


class ScriptedProvider:
    def __init__(self, config: ProviderConfig) -> None:
        self.config = config

    async def aclose(self) -> None:
        return None

    def turn_for(self, request: ModelRequest, hints: dict[str, Any]) -> dict[str, Any]:
        if self.config.mode == "calculator":
            return calculator_turn(request.messages)
        script = hints.get("script", self.config.script) or []
        if not isinstance(script, list):
            raise ScriptError("runtimeHints.script must be a list of turns")
        pos = request.iterations + request.failures
        if pos >= len(script):
            return {"text": FINAL_TEXT}
        turn = script[pos]
        if not isinstance(turn, dict):
            raise ScriptError(f"runtimeHints.script[{pos}] must be an object")
        return turn

    async def stream(self, request: ModelRequest, hints: dict[str, Any]) -> AsyncGenerator[Chunk, None]:
        if request.purpose == "summary":  # compaction summaries do not consume the script
            n = len(request.messages) - 2
            yield TextDelta(f"Summary of {n} earlier messages (scripted).")
            yield StreamEnd(finish_reason="stop")
            return
        try:
            turn = self.turn_for(request, hints)
        except ScriptError as exc:
            raise ModelCallError("invalid", str(exc)) from None
        delay_s = min(max(0.0, float(turn.get("delayMs", 0))), limits.MAX_SCRIPT_DELAY_MS) / 1000.0
        if turn.get("stall"):
            await asyncio.sleep(delay_s or 3600.0)
        error = turn.get("error")
        text = orjson.dumps(turn["json"]).decode() if "json" in turn else str(turn.get("text", ""))
        if turn.get("echoContext"):
            text = orjson.dumps(
                {
                    "messages": [
                        # as a provider gets them: createdAt is the run's, not the wire's
                        m.model_dump(mode="json", by_alias=True, exclude_none=True, exclude={"created_at"})
                        for m in request.messages
                    ],
                    "tools": [t.name for t in request.tools],
                }
            ).decode()
        calls = turn.get("toolCalls") or []
        if error is None and not text and not calls:
            text = FINAL_TEXT
        pieces = _split(text, self.config.chunk_chars) if text else []
        fail_after = int(error.get("afterChunks", 0)) if isinstance(error, dict) else 0
        if error is not None and fail_after == 0:
            if delay_s:
                await asyncio.sleep(delay_s)
            raise _error(error)
        for piece in _split(str(turn.get("reasoning", "")), self.config.chunk_chars):
            yield ReasoningDelta(piece)
        step = delay_s / max(1, len(pieces))
        for i, piece in enumerate(pieces):
            if step:
                await asyncio.sleep(step)
            yield TextDelta(piece)
            if error is not None and i + 1 >= fail_after:
                raise _error(error)
        if error is not None:
            raise _error(error)
        if delay_s and not pieces:
            await asyncio.sleep(delay_s)
        for i, call in enumerate(calls):
            if not isinstance(call, dict) or "name" not in call:
                raise ModelCallError("invalid", f"script toolCalls[{i}] needs a name")
            raw = call.get("rawArguments")
            args = raw if isinstance(raw, str) else orjson.dumps(call.get("arguments", {})).decode()
            call_id = str(call.get("id") or f"call_{request.run_id[-12:]}_{request.model_call_index}_{i}")
            yield ToolCallDelta(index=i, id=call_id, name=str(call["name"]), arguments=args)
        out_tokens = (len(text) + sum(len(str(c)) for c in calls)) // 4 + 1
        prompt = policy.estimate_tokens(request.messages)
        read, write = cache_usage(request.messages, prompt) if self.config.report_cache else (0, 0)
        yield StreamEnd(
            finish_reason=turn.get("finishReason", "tool_calls" if calls else "stop"),
            usage=Usage(
                input_tokens=prompt,
                output_tokens=out_tokens,
                estimated=True,
                cache_read_tokens=read,
                cache_write_tokens=write,
            ),
        )


def cache_usage(messages: list[Message], prompt: int) -> tuple[int, int]:
    """(cache reads, cache writes) of a prompt of ``prompt`` tokens, as Anthropic reports them with a
    breakpoint on its last message: the previous call's prompt is read, the rest written."""
    if prompt < MIN_CACHE_TOKENS:
        return 0, 0
    last = max((i for i, m in enumerate(messages) if m.role == "assistant"), default=0)
    read = policy.estimate_tokens(messages[:last]) if last else 0
    read = read if read >= MIN_CACHE_TOKENS else 0
    return read, prompt - read


def _split(text: str, size: int) -> list[str]:
    size = max(1, size)
    return [text[i : i + size] for i in range(0, len(text), size)]


def _error(spec: Any) -> ModelCallError:
    if not isinstance(spec, dict):
        return ModelCallError("invalid", "script error turn must be an object")
    message = str(spec.get("message", "scripted failure"))
    kind = spec.get("kind")
    if kind in ("connection", "timeout", "overflow", "stream", "invalid"):
        return ModelCallError(kind, message)
    status = int(spec.get("status", 500))
    if spec.get("code") == "context_length_exceeded":
        return ModelCallError("overflow", message, status=status)
    ra = spec.get("retryAfterMs")
    return ModelCallError("http", message, status=status, retry_after_ms=int(ra) if ra is not None else None)


def calculator_turn(messages: list[Message]) -> dict[str, Any]:
    """The demo agent: call the calculator once for the last user message, then answer."""
    last_user = max((i for i, m in enumerate(messages) if m.role == "user"), default=-1)
    if last_user < 0:
        return {"text": "Ask me some arithmetic."}
    after = messages[last_user + 1 :]
    tool_msgs = [m for m in after if m.role == "tool"]
    if tool_msgs:
        result = preamble.unframe(tool_msgs[-1].text)
        if result.startswith("error"):
            return {"text": f"I could not compute that: {result}"}
        return {"text": f"The answer is {result}."}
    match = max(_EXPR.findall(messages[last_user].text), key=len, default="").strip()
    if not any(ch.isdigit() for ch in match):
        return {"text": "I can only do arithmetic; give me an expression such as 6 * 7."}
    return {"toolCalls": [{"name": "calculator", "arguments": {"expression": match}}]}
