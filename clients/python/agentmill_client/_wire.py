"""What goes on the wire for the clients: request bodies and headers, listing query parameters,
error answers (raised as ApiError) and Server-Sent Events read back as RunEvents."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson

from agentmill_client.codec import to_jsonable
from agentmill_client.errors import ApiError
from agentmill_client.inputs import RunInput
from agentmill_client.outputs import RunEvent

__all__ = ["body", "check", "headers", "listing_params", "parse_sse"]


def body(run: RunInput | dict[str, Any]) -> dict[str, Any]:
    return to_jsonable(run) if isinstance(run, RunInput) else run


def check(resp: httpx.Response) -> Any:
    if resp.status_code >= 400:
        kept = {h: resp.headers[h] for h in ("Retry-After", "WWW-Authenticate") if h in resp.headers}
        try:
            err = resp.json()["error"]
            code, message = err.get("code", "error"), err.get("message", resp.text)
        except (ValueError, KeyError, TypeError, AttributeError):
            code, message = "http_error", resp.text[:500]
        raise ApiError(resp.status_code, code, message, headers=kept or None)
    return resp.json()


def headers(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


_inject: Any = None  # opentelemetry.propagate.inject once looked for; False: not installed


def trace_headers(into: dict[str, str] | None = None) -> dict[str, str]:
    """``into`` with the caller's current trace context (W3C ``traceparent``/``tracestate``) when
    opentelemetry-api is installed and a span is current, so the runs a submission creates continue
    the caller's trace; ``into`` unchanged otherwise. The import is tried once."""
    global _inject
    out = into if into is not None else {}
    if _inject is None:
        try:
            from opentelemetry.propagate import inject
        except ImportError:
            _inject = False
        else:
            _inject = inject
    if _inject:
        _inject(out)
    return out


def listing_params(
    status: str | None,
    agent: str | None,
    session_id: str | None,
    batch_id: str | None,
    metadata: dict[str, Any] | None,
    created_after: int | None,
    created_before: int | None,
    parent_run_id: str | None = None,
) -> list[tuple[str, str | int | float | bool | None]]:
    out: list[tuple[str, str | int | float | bool | None]] = []
    for name, value in (("status", status), ("agent", agent), ("sessionId", session_id), ("batchId", batch_id),
                        ("createdAfter", created_after), ("createdBefore", created_before),
                        ("parentRunId", parent_run_id)):  # fmt: skip
        if value is not None:
            out.append((name, str(value)))
    for k, v in (metadata or {}).items():
        text = (
            ("true" if v else "false")
            if isinstance(v, bool)
            else v
            if isinstance(v, str)
            else orjson.dumps(v).decode()
        )
        out.append(("metadata", f"{k}={text}"))
    return out


async def parse_sse(resp: httpx.Response) -> AsyncIterator[RunEvent]:
    data: list[str] = []
    async for line in resp.aiter_lines():
        if line == "":
            if data:
                yield RunEvent.model_validate(orjson.loads("\n".join(data)))
                data = []
        elif line.startswith("data:"):
            data.append(line[5:].lstrip(" "))
