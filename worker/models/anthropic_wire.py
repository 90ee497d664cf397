"""A model request as an Anthropic Messages API body. Pure: no I/O.

- The system messages at the head of the transcript become the top-level ``system``; a system
  message further on goes as a user text block (the API has no system role in ``messages``).
- An assistant reply is its thinking blocks (unchanged, signatures and all), its text, then a
  ``tool_use`` block per call; tool results are ``tool_result`` blocks in a user message, and
  consecutive messages of one role are merged into one (the API wants the roles to alternate).
- Images: a ``data:`` URL becomes a base64 source, an https URL a url source.
- ``toolChoice`` as the openai kind takes it: ``auto``, ``required`` (-> ``any``), ``none``, or
  ``{"type": "function", "function": {"name": …}}`` (-> ``{"type": "tool", "name": …}``).
- ``responseFormat``: asked for in the system prompt (the answer is validated by agentmill).
- Prompt caching: ``cache_control`` breakpoints on the last tool, the system prompt, the end of
  the previous call's prompt and the end of this one (at most the API's 4), so each call reads
  what the previous one wrote. Nothing here depends on the call's position, time or attempt: the
  tools and the system prompt are the same bytes on every call of a run.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from agentmill_client.models import ImagePart, Message, ResponseFormat
from shared.provider_config import ProviderConfig
from worker.core.config import ToolSpec
from worker.machine import ModelRequest, wire_id

__all__ = [
    "EPHEMERAL",
    "MAX_BREAKPOINTS",
    "format_instruction",
    "request_body",
    "wire_messages",
    "wire_tool_choice",
]

EPHEMERAL = {"type": "ephemeral"}
MAX_BREAKPOINTS = 4  # the API refuses more cache_control blocks in one request


def format_instruction(fmt: ResponseFormat) -> str:
    """What the system prompt says about a run's responseFormat."""
    if fmt.json_schema is None:
        return "Answer with one JSON object and nothing else."
    schema = orjson.dumps(fmt.json_schema.schema_, option=orjson.OPT_SORT_KEYS).decode()
    return f"Answer with one JSON object and nothing else, matching this JSON Schema: {schema}"


def wire_tool_choice(choice: str | dict[str, Any] | None) -> dict[str, Any] | None:
    if choice is None:
        return None
    if isinstance(choice, dict):
        return {"type": "tool", "name": choice["function"]["name"]}
    return {"auto": {"type": "auto"}, "required": {"type": "any"}, "none": {"type": "none"}}.get(choice)


def _image(url: str) -> dict[str, Any]:
    if url.startswith("data:"):
        head, _, data = url.partition(",")
        media = head[len("data:") :].split(";", 1)[0]
        return {"type": "image", "source": {"type": "base64", "media_type": media, "data": data}}
    return {"type": "image", "source": {"type": "url", "url": url}}


def _user_blocks(m: Message) -> list[dict[str, Any]]:
    if isinstance(m.content, str):
        return [{"type": "text", "text": m.content}] if m.content else []
    return [
        _image(p.image_url.url) if isinstance(p, ImagePart) else {"type": "text", "text": p.text}
        for p in m.content
        if isinstance(p, ImagePart) or p.text
    ]


def _input(arguments: str) -> dict[str, Any]:
    """A call's arguments as the object ``tool_use.input`` must be ({} when they are not one)."""
    try:
        value = orjson.loads(arguments or "{}")
    except orjson.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def _assistant_blocks(m: Message) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = [
        b.model_dump(mode="json", exclude_none=True) for b in m.thinking_blocks or ()
    ]
    if m.text:
        blocks.append({"type": "text", "text": m.text})
    for c in m.tool_calls or ():
        blocks.append({"type": "tool_use", "id": wire_id(c), "name": c.name, "input": _input(c.arguments)})
    return blocks


def _as_text(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Tool blocks told as text: for a call that offers no tools (the API refuses tool blocks then)."""
    out: list[dict[str, Any]] = []
    for b in blocks:
        if b["type"] == "tool_use":
            args = orjson.dumps(b["input"]).decode()
            out.append({"type": "text", "text": f"[called the tool {b['name']} with {args}]"})
        elif b["type"] == "tool_result":
            out.append({"type": "text", "text": f"[tool result: {b.get('content', '')}]"})
        elif b["type"] not in ("thinking", "redacted_thinking"):
            out.append(b)
    return out


def wire_messages(
    messages: list[Message], ids: Mapping[str, str], *, tools: bool = True
) -> tuple[list[str], list[dict[str, Any]]]:
    """The system texts at the head, and the rest as alternating user/assistant messages, the
    first a user's (``tools`` False: tool calls and results as text)."""
    system: list[str] = []
    i = 0
    while i < len(messages) and messages[i].role == "system":
        if messages[i].text:
            system.append(messages[i].text)
        i += 1
    out: list[dict[str, Any]] = []
    for m in messages[i:]:
        role = "assistant" if m.role == "assistant" else "user"
        if m.role == "assistant":
            blocks = _assistant_blocks(m)
        elif m.role == "tool":
            call = m.tool_call_id or ""
            result: dict[str, Any] = {"type": "tool_result", "tool_use_id": ids.get(call, call)}
            if m.text:
                result["content"] = m.text
            blocks = [result]
        elif m.role == "system":
            blocks = [{"type": "text", "text": m.text}] if m.text else []
        else:
            blocks = _user_blocks(m)
        if not tools:
            blocks = _as_text(blocks)
        if not blocks:
            continue
        if not out and role == "assistant":
            out.append({"role": "user", "content": [{"type": "text", "text": "(the conversation so far)"}]})
        if out and out[-1]["role"] == role:
            # tool results first in a user message, as the API wants them
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})
    return system, out


def _tool(t: ToolSpec) -> dict[str, Any]:
    return {"name": t.name, "description": t.description, "input_schema": t.parameters}


def _breakpoints(out: list[dict[str, Any]], left: int) -> None:
    """Mark the end of this prompt and the end of the previous call's (the message before the last
    assistant reply): the next call reads the first, this one reads the second."""
    marks: list[int] = []
    if out:
        marks.append(len(out) - 1)
    last_reply = next((i for i in range(len(out) - 1, -1, -1) if out[i]["role"] == "assistant"), None)
    if last_reply is not None and last_reply > 0 and last_reply - 1 not in marks:
        marks.append(last_reply - 1)
    for i in marks[:left]:
        out[i]["content"][-1] = {**out[i]["content"][-1], "cache_control": EPHEMERAL}


def _plain(m: dict[str, Any]) -> dict[str, Any]:
    """A message of one unmarked text block as a string, the API's short form of the same (servers
    that translate it to chat completions then send a string, which every such server takes)."""
    blocks = m["content"]
    if len(blocks) == 1 and blocks[0]["type"] == "text" and "cache_control" not in blocks[0]:
        return {"role": m["role"], "content": blocks[0]["text"]}
    return m


def request_body(cfg: ProviderConfig, req: ModelRequest) -> dict[str, Any]:
    ids = {c.id: wire_id(c) for m in req.messages for c in m.tool_calls or ()}
    system, messages = wire_messages(req.messages, ids, tools=bool(req.tools))
    if req.response_format is not None and cfg.response_format_style != "none":
        system.append(format_instruction(req.response_format))
    if not messages:  # the API needs one message; a run always has its user message, a bare call may not
        messages = [{"role": "user", "content": [{"type": "text", "text": "(no message)"}]}]
    cache = cfg.prompt_caching
    body: dict[str, Any] = {"model": cfg.model, "max_tokens": cfg.max_tokens, "stream": True}
    left = MAX_BREAKPOINTS
    if req.tools:
        tools = [_tool(t) for t in req.tools]
        if cache:
            tools[-1] = {**tools[-1], "cache_control": EPHEMERAL}
            left -= 1
        body["tools"] = tools
        if (choice := wire_tool_choice(cfg.tool_choice)) is not None:
            body["tool_choice"] = choice
    if system:
        text = "\n\n".join(system)
        if cache:
            body["system"] = [{"type": "text", "text": text, "cache_control": EPHEMERAL}]
            left -= 1
        else:
            body["system"] = text
    if cache:
        _breakpoints(messages, left)
    body["messages"] = [_plain(m) for m in messages]
    if cfg.thinking is not None:
        body["thinking"] = {"type": "enabled", "budget_tokens": cfg.thinking.budget_tokens}
    if cfg.temperature is not None:
        body["temperature"] = cfg.temperature
    body.update(cfg.extra_body)
    return body
