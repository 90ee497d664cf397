"""Request shapes OpenAI-compatible servers differ on, and what to send to one that refused a shape.

A server that refuses a shape says so in a recognisable error (``refused_shape``): llama-cpp-python
validates the body with pydantic and answers 500 naming the field (``('body', 'response_format',
'type')``), others answer 400 or 422 with the field in the message. The provider then sends the call
once more with the shape's alternative (``adapt``) and, if that one is taken, remembers the endpoint
for the process's life (``ShapeMemory``, bounded), so later calls go out in the alternative at once.

- ``response_format``: OpenAI's ``{"type": "json_schema", …}`` → ``{"type": "json_object",
  "schema": …}`` (llama-cpp-python, Anyscale). A profile's ``responseFormatStyle`` overrides.
- ``content_parts``: a message's list of text and image parts → one string, each image as
  ``[image]`` (servers that take only string content). A profile's ``imageParts`` overrides.
- ``tool_choice``: ``"required"`` → the named form of the one tool offered (else ``"auto"``); the
  named form → ``"required"``.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

__all__ = ["MAX_ENDPOINTS", "REFUSAL_STATUSES", "SHAPES", "ShapeMemory", "adapt", "refused_shape"]

log = logging.getLogger("agentmill.models")

SHAPES = ("response_format", "content_parts", "tool_choice")
REFUSAL_STATUSES = frozenset({400, 422, 500})  # llama-cpp-python answers a body it cannot validate with 500
MAX_ENDPOINTS = 1_024  # endpoints remembered; the least recently used is forgotten past it


def refused_shape(status: int, message: str, body: dict[str, Any]) -> str | None:
    """The shape of ``body`` a server's error refuses, or None (not a refusal of a known shape, or
    the body does not hold that shape: nothing to change)."""
    if status not in REFUSAL_STATUSES:
        return None
    text = message.lower()
    fmt = body.get("response_format")
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema" and "response_format" in text:
        return "response_format"
    if body.get("tool_choice") not in (None, "auto", "none") and "tool_choice" in text:
        return "tool_choice"
    lists = any(isinstance(m.get("content"), list) for m in body.get("messages") or ())
    if lists and "content" in text and ("valid string" in text or "must be a string" in text):
        return "content_parts"
    return None


def adapt(
    body: dict[str, Any], shapes: frozenset[str], *, keep: frozenset[str] = frozenset()
) -> dict[str, Any]:
    """``body`` with each shape of ``shapes`` (less those in ``keep``: set by the profile) in its
    alternative; the body itself when none applies."""
    todo = shapes - keep
    if not todo:
        return body
    out = dict(body)
    fmt = out.get("response_format")
    if "response_format" in todo and isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        out["response_format"] = {
            "type": "json_object",
            "schema": (fmt.get("json_schema") or {}).get("schema"),
        }
    choice = out.get("tool_choice")
    if "tool_choice" in todo and choice is not None:
        tools = out.get("tools") or []
        if choice == "required":
            one = tools[0]["function"]["name"] if len(tools) == 1 else None
            out["tool_choice"] = {"type": "function", "function": {"name": one}} if one else "auto"
        elif isinstance(choice, dict):
            out["tool_choice"] = "required"
    if "content_parts" in todo:
        out["messages"] = [_flat(m) for m in out.get("messages") or ()]
    return out


def _flat(m: dict[str, Any]) -> dict[str, Any]:
    parts = m.get("content")
    if not isinstance(parts, list):
        return m
    text = "".join(p.get("text", "") if p.get("type") == "text" else "[image]" for p in parts)
    return {**m, "content": text}


class ShapeMemory:
    """The shapes each endpoint (a provider's URL) was found to refuse, for the process's life:
    bounded (``MAX_ENDPOINTS``, least recently used forgotten), each switch logged and counted once."""

    def __init__(self, on_switch: Callable[[str], None] | None = None, limit: int = MAX_ENDPOINTS) -> None:
        self._known: OrderedDict[str, frozenset[str]] = OrderedDict()
        self._interrupting: OrderedDict[str, None] = OrderedDict()  # endpoints already warned about
        self._on_switch = on_switch
        self.limit = limit

    def of(self, endpoint: str) -> frozenset[str]:
        got = self._known.get(endpoint)
        if got is None:
            return frozenset()
        self._known.move_to_end(endpoint)
        return got

    def learn(self, endpoint: str, shape: str, detail: str) -> None:
        """The endpoint takes ``shape``'s alternative and refused the shape: remember it."""
        have = self.of(endpoint)
        if shape in have:
            return
        self._known[endpoint] = have | {shape}
        self._known.move_to_end(endpoint)
        while len(self._known) > self.limit:
            self._known.popitem(last=False)
        log.warning(
            "%s refused the request's %s (%s); sending its alternative from now on (see docs/operations.md)",
            endpoint, shape, detail[:200],
        )  # fmt: skip
        if self._on_switch is not None:
            self._on_switch(shape)

    def interrupted(self, endpoint: str) -> None:
        """A stream of ``endpoint`` ended with ``[DONE]`` and no finish_reason, the way
        llama-cpp-python's server ends a stream when another request arrives: said once an endpoint
        (the call is retried as a truncation all the same)."""
        if endpoint in self._interrupting:
            return
        self._interrupting[endpoint] = None
        while len(self._interrupting) > self.limit:
            self._interrupting.popitem(last=False)
        log.warning(
            "%s ended a stream with [DONE] and no finish_reason; a server that interrupts streams under "
            "concurrent requests (llama-cpp-python's) needs maxConcurrent: 1 on the provider",
            endpoint,
        )
