"""HTTP tools declared in a profile: POST ``{runId, toolCallId, name, arguments[, runtimeInitData]}`` to a URL with
``Idempotency-Key: <runId>:<toolCallId>``, the same key on every re-execution of the call, so the
remote side can deduplicate a call that a crashed worker had already sent, and
``Agentmill-Fencing-Token: <epoch>``, which grows each time another worker takes the run over, so
the remote side can refuse a request from a worker that lost the run (a token lower than one seen)."""

from __future__ import annotations

import contextlib
import os
from typing import Any

import httpx
import orjson

from agentmill_client import limits
from shared.netguard import BlockedAddressError, ResponseTooLargeError, guarded_request
from shared.profiles import HttpToolConfig, ToolSettings
from worker.telemetry import tracing
from worker.tools.base import ToolContext, ToolError, ToolOutcome

__all__ = ["HttpTool"]


def _header_value(value: str) -> str:
    """``env:NAME`` reads a secret from the environment; anything else is literal."""
    if value.startswith("env:"):
        return os.environ.get(value[4:], "")
    return value


class HttpTool:
    def __init__(self, config: HttpToolConfig, settings: ToolSettings, client: httpx.AsyncClient) -> None:
        self.config = config
        self.settings = settings
        self.client = client
        self.name = config.name
        self.description = config.description
        self.parameters = config.parameters

    def __repr__(self) -> str:  # never the header values: they may be secrets
        return f"HttpTool({self.name!r}, {self.config.method} {self.config.url})"

    async def __call__(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
        cfg = self.config
        fields: dict[str, Any] = {
            "runId": ctx.run_id, "toolCallId": ctx.tool_call_id, "name": cfg.name, "arguments": args
        }  # fmt: skip
        if ctx.init_data:
            fields["runtimeInitData"] = ctx.init_data
        body = orjson.dumps(fields)
        headers = {k: _header_value(v) for k, v in cfg.headers.items()}
        headers.update({"Content-Type": "application/json", "Idempotency-Key": ctx.idempotency_key,
                        "Agentmill-Fencing-Token": str(ctx.fencing_token)})  # fmt: skip
        tracing.inject(headers)  # the tool call's traceparent, when traces are on
        try:
            resp = await guarded_request(
                self.client, cfg.method, cfg.url, allow_hosts=cfg.allow_hosts, content=body, headers=headers,
                timeout=httpx.Timeout(self.settings.timeout_s), deadline_s=self.settings.timeout_s,
                max_bytes=limits.MAX_TOOL_RESPONSE_BYTES,
            )  # fmt: skip
        except BlockedAddressError as exc:
            raise ToolError(f"refused: {exc}") from None
        except ResponseTooLargeError as exc:
            raise ToolError(str(exc)) from None
        except httpx.TimeoutException:
            raise ToolError(f"{cfg.name} timed out", retryable=True) from None
        except httpx.TransportError as exc:
            raise ToolError(f"{cfg.name} unreachable: {type(exc).__name__}", retryable=True) from None
        text = resp.text
        if resp.status_code >= 500 or resp.status_code == 429:
            raise ToolError(f"{cfg.name} answered HTTP {resp.status_code}: {text[:200]}", retryable=True)
        if resp.status_code >= 400:
            return ToolOutcome(
                f"error: HTTP {resp.status_code}: {text[: cfg.max_response_chars]}", is_error=True
            )
        if "json" in resp.headers.get("content-type", ""):
            with contextlib.suppress(ValueError):
                text = orjson.dumps(resp.json()).decode()
        if len(text) > cfg.max_response_chars:
            text = text[: cfg.max_response_chars] + "…[truncated]"
        return ToolOutcome(text)
